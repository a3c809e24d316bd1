import { ApiError } from '../errors.js';
import { defineKind } from './define.js';
import { oneOf, readOnly, str } from './schema.js';

// Public types: {email, idp}. Users are named by their email address (links read
// /org/ORG/user/EMAIL, as the CLI builds them); a JWT whose email claim names a user of the org
// authenticates as that user. Admins add users with POST /org/{org}/user or …/user/-invite.
const EMAIL = '[^\\s@/]+@[^\\s@/]+';

export default defineKind({
  kind: 'user',
  scope: 'org',
  summary: 'A person who is a member of the org. Keel names users by their email address (links read /org/ORG/user/EMAIL).',
  // The schema also admits a plain name (2..64, the common rule) so stored bodies validate; check() requires the email.
  name: str({ minLength: 2, maxLength: 254, pattern: `^([a-z][-a-z0-9]{0,62}[a-z0-9]|${EMAIL})$` }),
  fields: {
    email: str({ minLength: 3, maxLength: 254, pattern: `^${EMAIL}$` }),
    idp: str({ maxLength: 128 }),
    origin: readOnly(oneOf(['default', 'builtin'])),
  },
  required: ['email'],
  permissions: [
    { name: 'delete', description: 'Remove users from the org' },
    { name: 'edit', description: 'Modify existing users' },
    { name: 'impersonate', description: 'Act as the user' },
    { name: 'invite', description: 'Invite new users to the org' },
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
  ],
  defaults(item) {
    item.origin ??= 'default';
    if (item.email === undefined && typeof item.name === 'string' && item.name.includes('@')) item.email = item.name;
  },
  check(item) {
    if (item.email !== item.name) {
      throw ApiError.badRequest(`a user is named by its email: name '${String(item.name)}' must equal email '${String(item.email)}'`, [
        { path: 'name', message: 'must equal email' },
      ]);
    }
  },
});
