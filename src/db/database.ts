import type { ColumnType, Generated } from 'kysely';

/** Timestamps come back as Date and go in as Date or ISO strings. */
type Timestamp = ColumnType<Date, Date | string, Date | string>;

export interface UsersTable {
  id: Generated<number>;
  username: string;
  email: string;
  password_hash: string;
  is_verified: Generated<boolean>;
  avatar: string | null;
  created_at: ColumnType<Date, never, never>;
  /** Tokens issued at or before this instant are dead (set by a password reset). */
  tokens_valid_after: Timestamp | null;
  /** SHA-256 of the one refresh token that may be used; null after logout. */
  refresh_token_hash: string | null;
  /** SHA-256 of the latest password-reset token; null once used. */
  reset_token_hash: string | null;
}

export interface Database {
  users: UsersTable;
}
