import { createHash } from 'node:crypto';
import t from 'tap';
import { build } from '../helper.js';

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

t.test('GET /reset-password serves a self-contained new-password page', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/reset-password?token=abc.def.ghi' });
  t.equal(res.statusCode, 200);
  // The page declares its encoding itself (<meta charset="utf-8">).
  t.equal(res.headers['content-type'], 'text/html');
  t.match(res.body, /^<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">/);
  t.equal(res.headers['referrer-policy'], 'no-referrer');
  t.equal(res.headers['cache-control'], 'no-store', 'the link carries a live token');

  const script = /<script>([\s\S]*?)<\/script>/.exec(res.body)?.[1] ?? '';
  const style = /<style>([\s\S]*?)<\/style>/.exec(res.body)?.[1] ?? '';
  t.equal(
    res.headers['content-security-policy'],
    `default-src 'none'; script-src ${sha256(script)}; style-src ${sha256(style)}; connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'`,
    'only the inline script and style of this very page run',
  );
  t.notMatch(res.body, /\b(src|href)=/, 'loads no other file');
  t.notMatch(res.body, /https?:\/\//, 'mentions no other host');
  t.match(res.body, '<input id="password" name="password" type="password" autocomplete="new-password" minlength="8" required>');
  t.match(script, "new URLSearchParams(window.location.search).get('token')", 'reads the token from its own URL');
  t.match(script, "fetch('/api/auth/reset-password'", 'posts to the reset operation');
  t.match(script, 'JSON.stringify({ token, password })');
  t.match(script, 'answer.message || answer.detail', "shows the answer's message or detail");
});

t.test('GET /reset-password without a token still serves the page, which says so', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: '/reset-password' });
  t.equal(res.statusCode, 200);
  t.match(res.body, 'This link has no reset token.');
});

t.test('GET /reset-password with an over-long token is 422', async (t) => {
  const app = await build(t);
  const res = await app.inject({ method: 'GET', url: `/reset-password?token=${'a'.repeat(2049)}` });
  t.equal(res.statusCode, 422);
  t.same(res.json(), { detail: 'querystring/token must NOT have more than 2048 characters' });
});
