/**
 * The SDK's account calls against the real service over HTTP: `exportAccount` gives the archive's
 * bytes, `changePassword` and `deleteAccount` resolve on 204 and throw an ApiError with the
 * service's detail on any error answer.
 */
import t from 'tap';
import { ApiError, changePassword, createContactsClient, deleteAccount, exportAccount, login } from '../../sdk/src/index.js';
import { buildAccountsApp, loggedInUser } from '../auth/accounts.js';

/** The ApiError `call` is rejected with: its status and the service's detail. */
async function refusal(call: Promise<unknown>): Promise<[number, string]> {
  try {
    await call;
  } catch (error) {
    if (error instanceof ApiError) return [error.status, error.detail];
    throw error;
  }
  throw new Error('the call resolved');
}

t.test('export, change the password, delete: through the SDK alone', async (t) => {
  const app = await buildAccountsApp(t);
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  const user = await loggedInUser(app);
  let token = user.accessToken;
  const client = createContactsClient(baseUrl, () => token);

  const archive = await exportAccount(client);
  t.equal(Buffer.from(archive.subarray(0, 4)).toString('latin1'), 'PK\x03\x04', 'a ZIP archive');

  t.same(await refusal(changePassword(client, 'wrong-password', 'a-new-password')), [403, 'Invalid password']);
  await changePassword(client, user.password, 'a-new-password');
  t.same(await refusal(exportAccount(client)), [401, 'Not authenticated'], 'the old token is ended');
  const { data } = await login(client, { username: user.username, password: 'a-new-password' });
  token = data!.access_token;

  t.same(await refusal(deleteAccount(client, user.password)), [403, 'Invalid password'], 'the old password is no longer it');
  await deleteAccount(client, 'a-new-password');
  t.same(await refusal(exportAccount(client)), [401, 'Not authenticated'], 'the account is gone');
});
