/** The contact both codec tests encode. */
import type { Contact } from '../../../src/contacts/formats/entries.js';

export const jane: Contact = {
  id: 7,
  first_name: 'Jane',
  last_name: 'Doe',
  email: 'jane@example.com',
  phone: '+14155550123',
  birthday: '1990-05-17',
  additional_data: null,
  created_at: '2025-01-01T00:00:00.000Z',
  updated_at: '2025-01-31T09:30:00.123Z',
};
