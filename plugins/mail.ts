import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import fp from 'fastify-plugin';
import nodemailer, { type Transporter } from 'nodemailer';

export interface MailMessage {
  to: string;
  subject: string;
  text: string;
  html?: string;
}

export interface Mailer {
  /** Sends one message; rejects when the transport fails. */
  send(message: MailMessage): Promise<void>;
  /**
   * Runs `task` (which may send) without waiting for it, so an answer does not wait for the mail,
   * nor tell by its timing whether one is sent. The app's close waits for it, database still open.
   */
  later(task: () => Promise<void>): void;
}

export interface MailOptions {
  /** A nodemailer transport to use instead of SMTP_URL or the outbox (tests). */
  transport?: Transporter;
}

declare module 'fastify' {
  interface FastifyInstance {
    mail: Mailer;
  }
}

/** Mail over SMTP when SMTP_URL is set; otherwise each message becomes an .eml file in the outbox folder. */
export default fp<MailOptions>(
  async (app, options) => {
    const { smtpUrl, outboxDir, mailFrom } = app.config;
    const outbox = !options.transport && !smtpUrl;
    const transport: Transporter =
      options.transport ??
      (smtpUrl
        ? nodemailer.createTransport(smtpUrl)
        : nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' }));
    if (outbox) app.log.info({ outboxDir }, 'SMTP_URL is unset: mail is written to the outbox folder');

    // Messages still on their way when the app closes are finished before the transport closes.
    const inFlight = new Set<Promise<void>>();
    const track = (work: Promise<void>) => {
      inFlight.add(work);
      void work.finally(() => inFlight.delete(work)).catch(() => {});
      return work;
    };

    async function deliver(message: MailMessage): Promise<void> {
      const info = await transport.sendMail({ from: mailFrom, ...message });
      if (!outbox) return;
      const file = path.join(outboxDir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${randomUUID()}.eml`);
      // Mails carry live verification and reset links: only this user may read them.
      await mkdir(outboxDir, { recursive: true, mode: 0o700 });
      await writeFile(file, (info as { message: Buffer }).message, { mode: 0o600 });
      // Without a mail server the log is the other place a developer finds the link; in production
      // logs travel further than the outbox, so they never carry a live token.
      const link = app.config.nodeEnv === 'production' ? undefined : /https?:\/\/\S+/.exec(message.text)?.[0];
      app.log.info({ to: message.to, subject: message.subject, file, link }, 'mail written to the outbox');
    }

    app.decorate('mail', {
      send: (message) => track(deliver(message)),
      later(task) {
        void track(task());
      },
    } satisfies Mailer);

    // Before onClose: a task may still read the database, which closes there.
    app.addHook('preClose', async () => {
      await Promise.allSettled(inFlight);
    });
    app.addHook('onClose', async () => {
      await Promise.allSettled(inFlight);
      transport.close();
    });
  },
  { name: 'mail', dependencies: ['config'], fastify: '5.x' },
);
