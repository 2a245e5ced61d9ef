import type { OperationHandlers } from '../http/operation-types.js';
import { pageHeaders } from '../http/pagination.js';
import * as contacts from './contacts.service.js';

const xCache = (hit: boolean) => (hit ? 'HIT' : 'MISS') as 'HIT' | 'MISS';

/** Handlers of the contacts operations in openapi.yaml. */
export const contactsHandlers = {
  listContacts: async (request) => {
    const { skip, limit, query } = request.query;
    const { value, hit } = await contacts.listContacts(request.server, request.userId, query, { skip, limit });
    return {
      status: 200,
      body: value.contacts,
      headers: { ...pageHeaders(request.url, skip, limit, value.total), 'X-Cache': xCache(hit) },
    };
  },

  createContact: async (request) => {
    const contact = await contacts.createContact(request.server, request.userId, request.body);
    return { status: 201, body: contact, headers: { Location: `/api/contacts/${contact.id}` } };
  },

  listUpcomingBirthdays: async (request) => {
    const { skip, limit, time_range } = request.query;
    const { value, hit } = await contacts.listUpcomingBirthdays(request.server, request.userId, time_range, { skip, limit });
    return {
      status: 200,
      body: value.contacts,
      headers: { ...pageHeaders(request.url, skip, limit, value.total), 'X-Cache': xCache(hit) },
    };
  },

  getContact: async (request) => {
    const { value, hit } = await contacts.getContact(request.server, request.userId, request.params.contact_id);
    return { status: 200, body: value, headers: { 'X-Cache': xCache(hit) } };
  },

  replaceContact: async (request) => ({
    status: 200,
    body: await contacts.replaceContact(request.server, request.userId, request.params.contact_id, request.body),
  }),

  updateContact: async (request) => ({
    status: 200,
    body: await contacts.patchContact(request.server, request.userId, request.params.contact_id, request.body),
  }),

  deleteContact: async (request) => ({
    status: 200,
    body: await contacts.deleteContact(request.server, request.userId, request.params.contact_id),
  }),
} satisfies Partial<OperationHandlers>;
