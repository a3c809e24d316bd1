// SQL pieces shared by the backends and by the query compiler.

export type Dialect = 'sqlite' | 'postgres';

/** Collects bind parameters and hands out the dialect's placeholder for each. */
export class SqlParams {
  readonly values: unknown[] = [];
  constructor(readonly dialect: Dialect) {}

  add(value: unknown): string {
    this.values.push(value);
    return this.dialect === 'sqlite' ? '?' : `$${this.values.length}`;
  }
}

/** A WHERE-clause fragment over the `resources` table aliased `r`; its parameters live in the SqlParams it was built with. */
export type SqlFragment = string;
