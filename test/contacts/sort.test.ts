/** The sort parser on its own: keys, directions and the exact error wording, checked left to right. */
import t from 'tap';
import { parseSort, SortError } from '../../src/contacts/sort.js';

const errorOf = (expression: string): string => {
  try {
    parseSort(expression);
  } catch (error) {
    if (error instanceof SortError) return error.message;
    throw error;
  }
  throw new Error(`expected '${expression}' to be refused`);
};

t.test('keys and directions', async (t) => {
  t.same(parseSort('id'), [{ field: 'id', descending: false }]);
  t.same(parseSort('-birthday,last_name'), [
    { field: 'birthday', descending: true },
    { field: 'last_name', descending: false },
  ]);
  t.same(parseSort('email,-created_at,updated_at'), [
    { field: 'email', descending: false },
    { field: 'created_at', descending: true },
    { field: 'updated_at', descending: false },
  ]);
});

t.test('errors: unknown field by name, then bad expressions, the key count last', async (t) => {
  t.equal(errorOf('nickname'), "Invalid sort field 'nickname'");
  t.equal(errorOf('-nickname'), "Invalid sort field 'nickname'", 'named without its -');
  t.equal(errorOf('Last_Name'), "Invalid sort field 'Last_Name'", 'names are lower case');
  t.equal(errorOf('phone'), "Invalid sort field 'phone'", 'phone is no sort key');
  t.equal(errorOf(''), 'Invalid sort expression', 'empty');
  t.equal(errorOf('id,'), 'Invalid sort expression', 'an empty key');
  t.equal(errorOf('-'), 'Invalid sort expression', 'a lone -');
  t.equal(errorOf('last_name,-last_name'), 'Invalid sort expression', 'a field twice, in either direction');
  t.equal(errorOf('id,first_name,last_name,email'), 'Invalid sort expression', 'more than 3 keys');
  t.equal(
    errorOf('id,first_name,last_name,nickname'),
    "Invalid sort field 'nickname'",
    'left to right: the unknown field before the count',
  );
  t.equal(errorOf('nickname,id,id'), "Invalid sort field 'nickname'", 'the first problem from the left');
  t.equal(errorOf('id,id,nickname'), 'Invalid sort expression', 'the first problem from the left');
  t.equal(errorOf(' id'), "Invalid sort field ' id'", 'no white space is trimmed');
});
