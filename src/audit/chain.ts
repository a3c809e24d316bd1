import { hash } from 'node:crypto';

/** The link of an org's audit chain: sha256(previous hash + "\n" + seq + "\n" + event body), hex. */
export function chainHash(previous: string, seq: number, body: string): string {
  return hash('sha256', `${previous}\n${seq}\n${body}`);
}
