/**
 * The SDK's conditional helpers against the real service over HTTP: `getContactWithTag` with
 * If-None-Match (304 as `notModified`), and the If-Match writes, whose 412 and 404 are results
 * (`changed`, `not-found`) while any other error answer is an ApiError.
 */
import t, { type Test } from 'tap';
import {
  ApiError,
  createContactsClient,
  deleteContactIfUnchanged,
  getContactWithTag,
  replaceContactIfUnchanged,
  updateContactIfUnchanged,
  type Contact,
  type ContactCreate,
  type ContactsClient,
} from '../../sdk/src/index.js';
import { buildContactsApp, createUser } from '../contacts/fixtures.js';

interface Setup {
  /** Two clients of one user, as on two devices. */
  client: ContactsClient;
  device: ContactsClient;
  /** A client of another user. */
  stranger: ContactsClient;
  /** A client with no token. */
  anonymous: ContactsClient;
  /** Every status the service answered, in order, for `client`. */
  statuses: number[];
}

async function setup(t: Test): Promise<Setup> {
  const app = await buildContactsApp(t);
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  const user = await createUser(app);
  const other = await createUser(app);
  const statuses: number[] = [];
  const client = createContactsClient(baseUrl, () => user.token, {
    fetch: async (request) => {
      const response = await fetch(request);
      statuses.push(response.status);
      return response;
    },
  });
  return {
    client,
    device: createContactsClient(baseUrl, () => user.token),
    stranger: createContactsClient(baseUrl, () => other.token),
    anonymous: createContactsClient(baseUrl),
    statuses,
  };
}

let counter = 0;
const contactBody = (): ContactCreate => {
  const n = ++counter;
  return { first_name: 'Jane', last_name: 'Doe', email: `jane.${n}@example.com`, phone: '+14155550123', birthday: '1990-05-17' };
};

/** A new contact and the ETag its 201 carried. */
async function created(client: ContactsClient): Promise<{ contact: Contact; etag: string }> {
  const { data, response } = await client.POST('/api/contacts/', { body: contactBody() });
  return { contact: data!, etag: response.headers.get('ETag')! };
}

/** The contact as the service holds it now, or null. */
async function stored(client: ContactsClient, id: number): Promise<Contact | null> {
  const { data } = await client.GET('/api/contacts/{contact_id}', { params: { path: { contact_id: id } } });
  return data ?? null;
}

t.test('getContactWithTag: the tag of the create, a 304 as notModified, a new tag after a write, 404 as not-found', async (t) => {
  const { client, statuses } = await setup(t);
  const { contact, etag } = await created(client);
  t.match(etag, /^"[!#-~]+"$/, 'a strong tag');

  t.strictSame(await getContactWithTag(client, contact.id), { ok: true, notModified: false, contact, etag });
  statuses.length = 0;
  t.strictSame(await getContactWithTag(client, contact.id, etag), { ok: true, notModified: true, etag });
  t.strictSame(statuses, [304]);

  const patched = await client.PATCH('/api/contacts/{contact_id}', {
    params: { path: { contact_id: contact.id } },
    body: { first_name: 'Ada' },
  });
  const newTag = patched.response.headers.get('ETag')!;
  t.not(newTag, etag);
  t.strictSame(await getContactWithTag(client, contact.id, etag), { ok: true, notModified: false, contact: patched.data, etag: newTag });

  t.strictSame(await getContactWithTag(client, 2_147_483_647), { ok: false, reason: 'not-found' });
  t.strictSame(await getContactWithTag(client, 2_147_483_647, etag), { ok: false, reason: 'not-found' });
});

t.test('two devices update with the same tag: one write wins, the other is told the contact changed', async (t) => {
  const { client, device } = await setup(t);
  const { contact } = await created(client);
  const [first, second] = await Promise.all([getContactWithTag(client, contact.id), getContactWithTag(device, contact.id)]);
  if (!first.ok || first.notModified || !second.ok || second.notModified) throw new Error('both devices read the contact');
  t.equal(first.etag, second.etag);

  const outcomes = await Promise.all([
    updateContactIfUnchanged(client, contact.id, first.etag, { first_name: 'FromClient' }),
    updateContactIfUnchanged(device, contact.id, second.etag, { first_name: 'FromDevice' }),
  ]);
  const winner = outcomes.find((outcome) => outcome.ok);
  const loser = outcomes.find((outcome) => !outcome.ok);
  if (!winner?.ok || !loser) throw new Error(`one write should win and one lose: ${JSON.stringify(outcomes)}`);
  t.strictSame(loser, { ok: false, reason: 'changed' });
  t.not(winner.etag, first.etag);
  t.strictSame(await stored(client, contact.id), winner.contact, 'only the winner wrote');
  const loserClient = outcomes[0] === loser ? client : device;

  // The loser reads again (its old tag no longer matches) and retries with the new tag.
  const reread = await getContactWithTag(loserClient, contact.id, first.etag);
  t.strictSame(reread, { ok: true, notModified: false, contact: winner.contact, etag: winner.etag });
  const retried = await updateContactIfUnchanged(loserClient, contact.id, winner.etag, { last_name: 'Retried' });
  t.match(retried, { ok: true, contact: { first_name: winner.contact.first_name, last_name: 'Retried' } });
  if (!retried.ok) throw new Error('the retry should succeed');
  t.not(retried.etag, winner.etag);
  t.strictSame(await getContactWithTag(client, contact.id), { ok: true, notModified: false, contact: retried.contact, etag: retried.etag });
});

t.test('replace: a stale tag writes nothing; the current one replaces and returns the new tag', async (t) => {
  const { client } = await setup(t);
  const { contact, etag: stale } = await created(client);
  const patched = await client.PATCH('/api/contacts/{contact_id}', {
    params: { path: { contact_id: contact.id } },
    body: { last_name: 'Moved' },
  });
  const current = patched.response.headers.get('ETag')!;
  const replacement: ContactCreate = {
    first_name: 'Grace',
    last_name: 'Hopper',
    email: 'grace@example.com',
    phone: '+14155550199',
    birthday: '1986-12-09',
  };

  t.strictSame(await replaceContactIfUnchanged(client, contact.id, stale, replacement), { ok: false, reason: 'changed' });
  t.strictSame(await stored(client, contact.id), patched.data, 'nothing written');

  const replaced = await replaceContactIfUnchanged(client, contact.id, current, replacement);
  t.match(replaced, { ok: true, contact: { id: contact.id, ...replacement } });
  if (!replaced.ok) throw new Error('the replace should succeed');
  t.not(replaced.etag, current);
  t.strictSame(await getContactWithTag(client, contact.id, replaced.etag), { ok: true, notModified: true, etag: replaced.etag });
});

t.test('delete: a stale tag deletes nothing; the current one deletes; then not-found', async (t) => {
  const { client } = await setup(t);
  const { contact, etag: stale } = await created(client);
  const patched = await client.PATCH('/api/contacts/{contact_id}', {
    params: { path: { contact_id: contact.id } },
    body: { first_name: 'Kept' },
  });
  const current = patched.response.headers.get('ETag')!;

  t.strictSame(await deleteContactIfUnchanged(client, contact.id, stale), { ok: false, reason: 'changed' });
  t.strictSame(await stored(client, contact.id), patched.data, 'the contact is still there');
  // A PATCH that would change nothing is refused all the same.
  t.strictSame(await updateContactIfUnchanged(client, contact.id, stale, {}), { ok: false, reason: 'changed' });

  t.strictSame(await deleteContactIfUnchanged(client, contact.id, current), { ok: true, contact: patched.data });
  t.equal(await stored(client, contact.id), null);
  t.strictSame(await deleteContactIfUnchanged(client, contact.id, current), { ok: false, reason: 'not-found' });
  t.strictSame(await updateContactIfUnchanged(client, contact.id, current, { first_name: 'Gone' }), { ok: false, reason: 'not-found' });
});

t.test("another user's contact is not-found; other error answers are thrown as ApiError", async (t) => {
  const { client, stranger, anonymous } = await setup(t);
  const { contact, etag } = await created(client);
  const other = await created(client);

  t.strictSame(await getContactWithTag(stranger, contact.id, etag), { ok: false, reason: 'not-found' });
  t.strictSame(await updateContactIfUnchanged(stranger, contact.id, etag, { first_name: 'Mine' }), { ok: false, reason: 'not-found' });
  t.strictSame(await replaceContactIfUnchanged(stranger, contact.id, etag, contactBody()), { ok: false, reason: 'not-found' });
  t.strictSame(await deleteContactIfUnchanged(stranger, contact.id, etag), { ok: false, reason: 'not-found' });
  t.strictSame(await stored(client, contact.id), contact, 'untouched');

  const conflict = await updateContactIfUnchanged(client, other.contact.id, other.etag, { email: contact.email! }).catch(
    (error: unknown) => error,
  );
  t.ok(conflict instanceof ApiError);
  t.match(conflict, { status: 409, detail: 'Contact with this email already exists' });
  const invalid = await updateContactIfUnchanged(client, other.contact.id, other.etag, { email: 'not-an-email' }).catch(
    (error: unknown) => error,
  );
  t.match(invalid, { status: 422, detail: 'body/email must match format "email"' });
  t.strictSame(await stored(client, other.contact.id), other.contact, 'nothing written');

  const unauthenticated = await deleteContactIfUnchanged(anonymous, contact.id, etag).catch((error: unknown) => error);
  t.match(unauthenticated, { name: 'ApiError', status: 401, detail: 'Not authenticated' });
});
