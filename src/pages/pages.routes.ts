import { createHash } from 'node:crypto';
import type { OperationHandlers } from '../operation-types.js';

const STYLE = `
body { font: 16px/1.5 system-ui, sans-serif; max-width: 26rem; margin: 3rem auto; padding: 0 1rem; color: #1f2328; }
h1 { font-size: 1.4rem; }
label { display: block; margin-top: 1rem; font-weight: 600; }
input { box-sizing: border-box; width: 100%; padding: .5rem; margin-top: .25rem; font: inherit; }
button { margin-top: 1.25rem; padding: .5rem 1.25rem; font: inherit; cursor: pointer; }
#result { margin-top: 1.25rem; padding: .75rem; border-radius: 4px; }
#result:empty { display: none; }
#result.ok { background: #dafbe1; }
#result.error { background: #ffebe9; }
`;

// The token travels in the link's query string; the page reads it in the browser and sends it in a JSON body.
const SCRIPT = `
const form = document.getElementById('reset');
const result = document.getElementById('result');
const token = new URLSearchParams(window.location.search).get('token');
function show(text, ok) {
  result.textContent = text;
  result.className = ok ? 'ok' : 'error';
}
if (!token) {
  show('This link has no reset token. Ask for a new password-reset e-mail.', false);
  form.querySelector('button').disabled = true;
}
form.addEventListener('submit', async (event) => {
  event.preventDefault();
  const password = form.elements.password.value;
  if (password !== form.elements.confirm.value) {
    show('The two passwords differ.', false);
    return;
  }
  form.querySelector('button').disabled = true;
  try {
    const response = await fetch('/api/auth/reset-password', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ token, password }),
    });
    const answer = await response.json().catch(() => ({}));
    show(answer.message || answer.detail || 'Unexpected answer (HTTP ' + response.status + ')', response.ok);
    if (response.ok) form.hidden = true;
  } catch {
    show('The service could not be reached. Try again.', false);
  } finally {
    form.querySelector('button').disabled = false;
  }
});
`;

const PAGE = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Choose a new password</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<h1>Choose a new password</h1>
<form id="reset">
<label for="password">New password</label>
<input id="password" name="password" type="password" autocomplete="new-password" minlength="8" required>
<label for="confirm">Repeat it</label>
<input id="confirm" name="confirm" type="password" autocomplete="new-password" minlength="8" required>
<button type="submit">Set password</button>
</form>
<p id="result" role="status" aria-live="polite"></p>
</main>
<script>${SCRIPT}</script>
</body>
</html>
`;

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** Only this page's own inline script and style run, and it may talk to this service alone. */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  "form-action 'none'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** HTML pages for people: the page the password-reset mail links to. */
export const pagesHandlers = {
  async getResetPasswordPage() {
    return {
      status: 200,
      body: PAGE,
      // The link's token is in the URL: neither the Referer header nor a cache may keep it.
      headers: {
        'Referrer-Policy': 'no-referrer',
        'Content-Security-Policy': CONTENT_SECURITY_POLICY,
        'Cache-Control': 'no-store',
      } as const,
    };
  },
} satisfies Partial<OperationHandlers>;
