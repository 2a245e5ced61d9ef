/**
 * Mail that cannot be aimed (docs/limits.md, "Mail"): forgot-password and request-verification
 * mail one recipient at most MAIL_PER_RECIPIENT_PER_HOUR times an hour, whoever asks and from
 * wherever, with the same silent 202 beyond it; and a flood never voids the link already mailed.
 */
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import t, { type Test } from 'tap';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../plugins/config.js';
import { backend, build, type CapturedMail, smtpCapture, testEnv } from '../helper.js';
import { credentials, formBody, register, verifiedUser } from './accounts.js';

const FORGOT_ANSWER = '{"message":"If an account uses this address, a password-reset e-mail has been sent"}';
const VERIFY_ANSWER = '{"message":"If an unverified account uses this address, a verification e-mail has been sent"}';
/** 40 requests from four addresses, ten each: within the anonymous limit of each. */
const FLOOD = Array.from({ length: 40 }, (_, i) => `198.51.100.${1 + (i % 4)}`);

/** Asserts that every answer is the same 202: status, body and header names. */
function allAlike(t: Test, answers: LightMyRequestResponse[], body: string) {
  const names = (res: LightMyRequestResponse) =>
    Object.keys(res.headers)
      .filter((name) => !['date', 'x-request-id'].includes(name))
      .sort()
      .join(',');
  t.same(
    answers.map((res) => [res.statusCode, res.body, names(res)]),
    answers.map(() => [202, body, names(answers[0]!)]),
    `all ${answers.length} answers are the same 202`,
  );
}

/** The mails still unread that reached `to`, once the app has closed (its close waits for every mail it started). */
async function mailsAfterClose(app: FastifyInstance, messages: CapturedMail[], to: string): Promise<CapturedMail[]> {
  await app.close();
  return messages.filter((mail) => mail.to.some((address) => address.toLowerCase() === to.toLowerCase()));
}

t.test("a flood of forgot-password mails the victim 3 times, the same link, and the victim's link still resets", async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await build(t, { env: { SMTP_URL: mailbox.url } });
  const victim = await verifiedUser(app);
  await mailbox.next(); // the registration mail

  const own = await app.inject({ method: 'POST', url: '/api/auth/forgot-password', payload: { email: victim.email } });
  const link = (await mailbox.next()).link!;
  const answers = [own];
  for (const remoteAddress of FLOOD) {
    answers.push(
      await app.inject({ method: 'POST', url: '/api/auth/forgot-password', payload: { email: victim.email.toUpperCase() }, remoteAddress }),
    );
  }
  allAlike(t, answers, FORGOT_ANSWER);
  const more = [await mailbox.next(), await mailbox.next()];
  t.same(
    more.map((mail) => mail.link),
    [link, link],
    'two more mails, each with the live link again, not a new one that would void it',
  );
  // Every request past the allowance has been refused a mail by now, or will be: none can change the token.
  const token = new URL(link).searchParams.get('token')!;
  const reset = await app.inject({ method: 'POST', url: '/api/auth/reset-password', payload: { token, password: 'a-new-password-1' } });
  t.equal(reset.statusCode, 200, "the victim's link resets the password");
  t.equal(reset.body, '{"message":"Password has been reset"}');
  const form = formBody({ username: victim.username, password: 'a-new-password-1' });
  t.equal((await app.inject({ method: 'POST', url: '/api/auth/login', ...form })).statusCode, 200, 'the new password signs in');
  t.same(await mailsAfterClose(app, mailbox.messages, victim.email), [], 'no fourth mail (MAIL_PER_RECIPIENT_PER_HOUR)');
});

t.test('a flood of request-verification mails an unverified address 3 times, and its first link still verifies', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await build(t, { env: { SMTP_URL: mailbox.url } });
  const victim = credentials();
  t.equal((await register(app, victim)).statusCode, 201);
  const link = new URL((await mailbox.next()).link!);
  const answers = [];
  for (const remoteAddress of FLOOD) {
    answers.push(
      await app.inject({ method: 'POST', url: '/api/auth/request-verification', payload: { email: victim.email }, remoteAddress }),
    );
  }
  allAlike(t, answers, VERIFY_ANSWER);
  await mailbox.next();
  await mailbox.next();
  const verified = await app.inject({ method: 'GET', url: link.pathname + link.search });
  t.equal(verified.statusCode, 200, 'the first link verifies');
  t.equal(verified.body, '{"message":"Email verified"}');
  t.same(await mailsAfterClose(app, mailbox.messages, victim.email), [], "no fourth mail, the registration's counted");
});

t.test('each kind has its allowance, and MAIL_PER_RECIPIENT_PER_HOUR sets it', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await build(t, { env: { SMTP_URL: mailbox.url, MAIL_PER_RECIPIENT_PER_HOUR: '1' } });
  const victim = credentials();
  t.equal((await register(app, victim)).statusCode, 201);
  for (let i = 0; i < 3; i++) {
    await app.inject({ method: 'POST', url: '/api/auth/request-verification', payload: { email: victim.email } });
    await app.inject({ method: 'POST', url: '/api/auth/forgot-password', payload: { email: victim.email } });
  }
  const mails = await mailsAfterClose(app, mailbox.messages, victim.email);
  t.same(
    mails.map((mail) => /^Subject: (.*)\r?$/m.exec(mail.raw)?.[1]).sort(),
    ['Reset your password', 'Verify your e-mail address'],
    'one of each',
  );
});

t.test('instances share the allowance through Redis', { skip: backend === 'postgres' ? false : 'needs real Redis' }, async (t) => {
  const mailbox = await smtpCapture(t);
  const config = await loadConfig({ ...(await testEnv(t)), SMTP_URL: mailbox.url });
  const first = await buildApp({ config });
  const second = await buildApp({ config });
  t.teardown(() => Promise.all([first.close(), second.close()]));
  const victim = credentials();
  t.equal((await register(first, victim)).statusCode, 201);
  for (const app of [first, second, first, second]) {
    t.equal(
      (await app.inject({ method: 'POST', url: '/api/auth/request-verification', payload: { email: victim.email } })).statusCode,
      202,
    );
  }
  await second.close();
  const mails = await mailsAfterClose(first, mailbox.messages, victim.email);
  t.equal(mails.length, 3, "three in all, the registration's included, though each instance was asked twice");
});

t.test('a Redis outage opens no allowance: the process counts meanwhile', async (t) => {
  const mailbox = await smtpCapture(t);
  // Nothing listens on port 1.
  const app = await build(t, { env: { SMTP_URL: mailbox.url, REDIS_URL: 'redis://127.0.0.1:1', MAIL_PER_RECIPIENT_PER_HOUR: '2' } });
  const victim = credentials();
  t.equal((await register(app, victim)).statusCode, 201);
  for (let i = 0; i < 3; i++) {
    const res = await app.inject({ method: 'POST', url: '/api/auth/request-verification', payload: { email: victim.email } });
    t.equal(res.statusCode, 202, `request ${i + 1} is answered`);
  }
  t.equal((await mailsAfterClose(app, mailbox.messages, victim.email)).length, 2, "two in all, the registration's included");
});
