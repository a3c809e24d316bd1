import { defineKind } from './define.js';
import { oneOf, readOnly, str } from './schema.js';

// Public types: {email, idp}. Users join an org by invitation (POST /org/{org}/user/-invite).
export default defineKind({
  kind: 'user',
  scope: 'org',
  summary: 'A person who is a member of the org. Keel names users by their email address (links read /org/ORG/user/EMAIL).',
  fields: {
    email: str({ minLength: 3, maxLength: 254, pattern: '^[^\\s@]+@[^\\s@]+$' }),
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
});
