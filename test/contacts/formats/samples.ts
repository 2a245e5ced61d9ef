/** What both codec tests feed the codecs: a sample contact, and reproducible random text. */
import type { Contact } from '../../../src/contacts/formats/entries.js';
import { seededRandom } from '../../helper.js';

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

/** Random bytes from `seed`, read as UTF-8 (invalid sequences become U+FFFD), `n` at a time. */
export function randomText(seed: number): (n: number) => string {
  const random = seededRandom(seed);
  return (n) => Buffer.from(Array.from({ length: n }, () => Math.floor(random() * 256))).toString();
}
