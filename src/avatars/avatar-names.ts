import { randomBytes } from 'node:crypto';

/** 128 random bits in base64url: unguessable, so avatars cannot be listed by trying names. */
const RANDOM = '[A-Za-z0-9_-]{22}';
/** `<owner id>-<random>`: the name says whose the image is, so serving it reads one owner's row (one shard on Citus). */
const OWNED = new RegExp(`^([1-9][0-9]{0,9})-${RANDOM}$`);
/** A name issued before migration 034: the random part alone; `legacy_avatar_names` says whose it is. */
const LEGACY = new RegExp(`^${RANDOM}$`);
/** The largest user id (an integer column): a larger prefix names nobody. */
const MAX_USER_ID = 2_147_483_647;

/** A new name for an avatar of `userId`. */
export function newAvatarName(userId: number): string {
  return `${userId}-${randomBytes(16).toString('base64url')}`;
}

/** Whose an avatar name says it is: a user id, `legacy` for a name issued before owners were named, or null for no avatar name. */
export function avatarNameOwner(name: string): number | 'legacy' | null {
  if (LEGACY.test(name)) return 'legacy';
  const owned = OWNED.exec(name);
  const userId = owned ? Number(owned[1]) : NaN;
  return userId <= MAX_USER_ID ? userId : null;
}
