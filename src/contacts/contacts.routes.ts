import type { OperationHandlers } from '../operation-types.js';
import { pageHeaders } from '../../plugins/http/pagination.js';
import * as contacts from './contacts.service.js';

/** Handlers of the contacts operations in openapi.yaml. */
export const contactsHandlers = {
  async listContacts(request) {
    const { skip, limit, query } = request.query;
    const page = await contacts.listContacts(request.server, request.userId, query, { skip, limit });
    return { status: 200, body: page.contacts, headers: pageHeaders(request.url, skip, limit, page.total) };
  },

  async createContact(request) {
    const contact = await contacts.createContact(request.server, request.userId, request.body);
    return { status: 201, body: contact, headers: { Location: `/api/contacts/${contact.id}` } };
  },

  async listUpcomingBirthdays(request) {
    const { skip, limit, time_range } = request.query;
    const page = await contacts.listUpcomingBirthdays(request.server, request.userId, time_range, { skip, limit });
    return { status: 200, body: page.contacts, headers: pageHeaders(request.url, skip, limit, page.total) };
  },

  async getContact(request) {
    return { status: 200, body: await contacts.getContact(request.server, request.userId, request.params.contact_id) };
  },

  async replaceContact(request) {
    return { status: 200, body: await contacts.replaceContact(request.server, request.userId, request.params.contact_id, request.body) };
  },

  async updateContact(request) {
    return { status: 200, body: await contacts.updateContact(request.server, request.userId, request.params.contact_id, request.body) };
  },

  async deleteContact(request) {
    return { status: 200, body: await contacts.deleteContact(request.server, request.userId, request.params.contact_id) };
  },
} satisfies Partial<OperationHandlers>;
