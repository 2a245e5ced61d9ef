import { Readable } from 'node:stream';
import { mediaType } from '../../plugins/http/operations.js';
import { pageHeaders } from '../../plugins/http/pagination.js';
import { keyedRequest } from '../idempotency/idempotency.service.js';
import type { OperationHandlers } from '../operation-types.js';
import * as contacts from './contacts.service.js';
import * as sync from './sync.service.js';
import * as transfer from './transfer.service.js';

/** A contact answer: the contact and its strong tag. */
const tagged = (contact: contacts.Contact) => ({ body: contact, headers: { ETag: contacts.contactTag(contact) } });

/** A create's answer: 201, the contact, its tag and its URL. */
const created = (contact: contacts.Contact) => {
  const { body, headers } = tagged(contact);
  return { status: 201 as const, body, headers: { ...headers, Location: `/api/contacts/${contact.id}` } };
};

/** Handlers of the contacts operations in openapi.yaml. */
export const contactsHandlers = {
  async listContacts(request) {
    const { skip, limit, query, sort } = request.query;
    const page = await contacts.listContacts(request.server, request.userId, query, sort, { skip, limit });
    return { status: 200, body: page.contacts, headers: pageHeaders(request.url, skip, limit, page.total) };
  },

  async createContact(request) {
    const { server, userId, body } = request;
    const keyed = keyedRequest('createContact', userId, request.headers['idempotency-key'], mediaType(request), body);
    if (!keyed) return created(await contacts.createContact(server, userId, body));
    return contacts.createContactOnce(server, keyed, body, created);
  },

  async listUpcomingBirthdays(request) {
    const { skip, limit, time_range } = request.query;
    const page = await contacts.listUpcomingBirthdays(request.server, request.userId, time_range, { skip, limit });
    return { status: 200, body: page.contacts, headers: pageHeaders(request.url, skip, limit, page.total) };
  },

  async syncContacts(request) {
    const { token, limit } = request.query;
    return { status: 200, body: await sync.syncContacts(request.server, request.userId, token, limit) };
  },

  async exportContacts(request) {
    const { format, query, sort } = request.query;
    if (request.method === 'HEAD') {
      const { contentType, fileName } = transfer.exportHead(format, query, sort);
      const headers = { 'Content-Type': contentType, 'Content-Disposition': `attachment; filename="${fileName}"` };
      // A GET's headers but the size. HEAD is no operation of openapi.yaml (Fastify answers it for every
      // GET), so the types demand the GET's Content-Length; an empty stream keeps Fastify from setting
      // one of 0, since a HEAD's must be the GET's (RFC 9110 §8.6).
      return { status: 200, body: Readable.from([]), headers: headers as typeof headers & { 'Content-Length': string } };
    }
    const file = await transfer.exportContacts(request.server, request.userId, format, query, sort);
    return {
      status: 200,
      body: file.content,
      headers: {
        'Content-Type': file.contentType,
        'Content-Disposition': `attachment; filename="${file.fileName}"`,
        'Content-Length': String(file.size),
      },
    };
  },

  async importContacts(request) {
    const { server, userId, body } = request;
    // The route only takes the types openapi.yaml lists (415 otherwise), so this is one of them.
    const type = mediaType(request) as transfer.ImportType;
    const keyed = keyedRequest('importContacts', userId, request.headers['idempotency-key'], type, body);
    if (!keyed) return { status: 200, body: await transfer.importContacts(server, userId, type, body) };
    return transfer.importContactsOnce(server, keyed, type, body);
  },

  async getContact(request) {
    return { status: 200, ...tagged(await contacts.getContact(request.server, request.userId, request.params.contact_id)) };
  },

  async replaceContact(request) {
    const { userId, params, body, headers } = request;
    return { status: 200, ...tagged(await contacts.replaceContact(request.server, userId, params.contact_id, body, headers['if-match'])) };
  },

  async updateContact(request) {
    const { userId, params, body, headers } = request;
    return { status: 200, ...tagged(await contacts.updateContact(request.server, userId, params.contact_id, body, headers['if-match'])) };
  },

  async deleteContact(request) {
    const { userId, params, headers } = request;
    return { status: 200, body: await contacts.deleteContact(request.server, userId, params.contact_id, headers['if-match']) };
  },
} satisfies Partial<OperationHandlers>;
