/**
 * The SDK's sync loop (`syncContacts`) against the real service over HTTP: a full sync and then
 * deltas leave the store equal to the server's list; a sync cut short resumes from the last page
 * applied; an expired token (the app clock moved past SYNC_TOMBSTONE_DAYS) restarts a full sync that
 * replaces the store; an invalid token is an ApiError that leaves the store as it was.
 */
import t, { type Test } from 'tap';
import {
  ApiError,
  createContactsClient,
  memorySyncStore,
  syncContacts,
  type Contact,
  type ContactCreate,
  type ContactsClient,
  type MemorySyncStore,
  type SyncStore,
} from '../../sdk/src/index.js';
import { buildContactsApp, createUser } from '../contacts/fixtures.js';

const DAY_MS = 86_400_000;

async function setup(t: Test) {
  let clock = new Date();
  const app = await buildContactsApp(t, { now: () => clock });
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  /** A client of a new user, as the SDK's users make one. */
  const newClient = async () => {
    const user = await createUser(app);
    return createContactsClient(baseUrl, () => user.token);
  };
  return { client: await newClient(), newClient, advanceDays: (days: number) => (clock = new Date(clock.getTime() + days * DAY_MS)) };
}

let counter = 0;
const contactBody = (): ContactCreate => {
  const n = ++counter;
  return { first_name: 'Jane', last_name: `Number${n}`, email: `jane.${n}@example.com`, phone: '+14155550123', birthday: '1990-05-17' };
};

/** Creates `count` contacts, in order. */
async function create(client: ContactsClient, count: number): Promise<Contact[]> {
  const created: Contact[] = [];
  for (let i = 0; i < count; i++) {
    const { data } = await client.POST('/api/contacts/', { body: contactBody() });
    created.push(data!);
  }
  return created;
}

/** Every contact of the client's user, as the list answers (id order). */
async function serverContacts(client: ContactsClient): Promise<Contact[]> {
  const { data } = await client.GET('/api/contacts/', { params: { query: { limit: 1000 } } });
  return data!;
}

const held = (store: MemorySyncStore) => [...store.contacts.values()].sort((a, b) => a.id - b.id);

t.test('a full sync, then deltas after creates, updates and deletes: the store equals the server', async (t) => {
  const { client } = await setup(t);
  const contacts = await create(client, 25);
  const store = memorySyncStore();

  const full = await syncContacts(client, store, { limit: 10 });
  t.strictSame(full, { token: store.token, full: true, pages: 3, put: 25, removed: 0 });
  t.type(full.token, 'string');
  t.strictSame(held(store), await serverContacts(client));

  const [a, b, c, d] = contacts as [Contact, Contact, Contact, Contact];
  await client.PATCH('/api/contacts/{contact_id}', { params: { path: { contact_id: a.id } }, body: { first_name: 'Patched' } });
  await client.PUT('/api/contacts/{contact_id}', {
    params: { path: { contact_id: b.id } },
    body: { first_name: 'Put', last_name: 'Whole', email: 'put@example.com', phone: '+14155550000', birthday: '1980-01-01' },
  });
  await client.DELETE('/api/contacts/{contact_id}', { params: { path: { contact_id: c.id } } });
  await client.DELETE('/api/contacts/{contact_id}', { params: { path: { contact_id: d.id } } });
  const [added, gone] = (await create(client, 3)) as [Contact, Contact, Contact];
  await client.DELETE('/api/contacts/{contact_id}', { params: { path: { contact_id: gone.id } } });

  // Seven changes, two a page. A delta may repeat what the store holds (a transaction of another
  // database on the same server can hold the frontier back), so the counts are lower bounds.
  const delta = await syncContacts(client, store, { limit: 2 });
  t.equal(delta.full, false);
  t.equal(delta.token, store.token);
  t.ok(delta.pages >= 4, `${delta.pages} pages`);
  t.ok(delta.put >= 4, `${delta.put} put`);
  t.ok(delta.removed >= 3, `${delta.removed} removed`);
  const server = await serverContacts(client);
  t.strictSame(held(store), server);
  t.equal(server.length, 25 - 2 + 2);
  t.equal(store.contacts.get(a.id)?.first_name, 'Patched');
  t.equal(store.contacts.get(b.id)?.email, 'put@example.com');
  t.ok(store.contacts.has(added.id));
  t.notOk(store.contacts.has(c.id) || store.contacts.has(d.id) || store.contacts.has(gone.id));

  const quiet = await syncContacts(client, store);
  t.equal(quiet.full, false);
  t.strictSame(held(store), await serverContacts(client));
});

t.test('a sync cut short resumes after the last page applied, skipping nothing', async (t) => {
  const { client } = await setup(t);
  const contacts = await create(client, 12);
  const store = memorySyncStore();
  const saved: string[] = [];
  let puts = 0;
  const failing: SyncStore = {
    getToken: store.getToken,
    put(contact) {
      if (++puts === 7) throw new Error('disk full');
      store.put(contact);
    },
    remove: store.remove,
    clear: store.clear,
    setToken(token) {
      saved.push(token);
      store.setToken(token);
    },
  };

  await t.rejects(syncContacts(client, failing, { limit: 5 }), { message: 'disk full' });
  t.equal(saved.length, 1, 'only the first page was saved');
  t.equal(store.token, saved[0]);
  t.equal(store.contacts.size, 6, 'five of page 1 and one of page 2 put');

  // Meanwhile a contact of page 1 goes and one of page 3 changes.
  await client.DELETE('/api/contacts/{contact_id}', { params: { path: { contact_id: contacts[0]!.id } } });
  await client.PATCH('/api/contacts/{contact_id}', { params: { path: { contact_id: contacts[11]!.id } }, body: { first_name: 'Later' } });

  const resumed = await syncContacts(client, store, { limit: 5 });
  t.match(resumed, { full: false, pages: 2, put: 7, removed: 0 }, 'the full sync goes on from page 2, the store not cleared');
  t.equal(store.contacts.get(contacts[11]!.id)?.first_name, 'Later');
  await syncContacts(client, store, { limit: 5 });
  t.strictSame(held(store), await serverContacts(client), 'the next delta removes the deleted contact');
  t.notOk(store.contacts.has(contacts[0]!.id));
});

t.test('an expired token (410) starts a full sync that replaces everything the store held', async (t) => {
  const { client, advanceDays } = await setup(t);
  const [kept, deleted] = (await create(client, 2)) as [Contact, Contact];
  const store = memorySyncStore();
  await syncContacts(client, store);
  const oldToken = store.token!;
  await client.DELETE('/api/contacts/{contact_id}', { params: { path: { contact_id: deleted.id } } });
  // A contact the server never had, so the test sees the store cleared.
  store.put({ ...kept, id: 2_000_000_000 });

  advanceDays(31);
  const [added] = (await create(client, 1)) as [Contact];
  const expired = await client.GET('/api/contacts/sync', { params: { query: { token: oldToken } } });
  t.equal(expired.response.status, 410);
  t.strictSame(expired.error, { detail: 'Sync token expired; start a full sync' });

  let clears = 0;
  const result = await syncContacts(client, {
    ...store,
    clear: () => {
      clears++;
      store.clear();
    },
  });
  t.strictSame(result, { token: store.token, full: true, pages: 1, put: 2, removed: 0 });
  t.equal(clears, 1);
  t.strictSame(
    [...store.contacts.keys()].sort((x, y) => x - y),
    [kept.id, added.id],
  );
  t.strictSame(held(store), await serverContacts(client));
});

t.test("an invalid token (another user's) is an ApiError that leaves the store alone; `full` recovers", async (t) => {
  const { client: alice, newClient } = await setup(t);
  const bob = await newClient();
  await create(alice, 2);
  const [bobs] = (await create(bob, 1)) as [Contact];
  const store = memorySyncStore();
  await syncContacts(alice, store);
  const before = { token: store.token, contacts: held(store) };

  const error = await syncContacts(bob, store).catch((error: unknown) => error);
  t.ok(error instanceof ApiError, 'an ApiError');
  t.match(error, { status: 400, detail: 'Invalid sync token', message: '400: Invalid sync token' });
  t.strictSame({ token: store.token, contacts: held(store) }, before, 'the store is as it was');

  // A full sync that cannot start (limit out of range: 422) does not clear the store either.
  const refused = await syncContacts(bob, store, { full: true, limit: 0 }).catch((error: unknown) => error);
  t.match(refused, { status: 422, detail: 'querystring/limit must be >= 1' });
  t.strictSame({ token: store.token, contacts: held(store) }, before);

  const recovered = await syncContacts(bob, store, { full: true });
  t.strictSame(recovered, { token: store.token, full: true, pages: 1, put: 1, removed: 0 });
  t.strictSame(held(store), [bobs]);
});
