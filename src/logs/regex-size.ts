// An upper bound on the size a regular expression in RE2 syntax compiles to (its number of
// instructions), read from its text alone. Compiling takes time in proportion to that size, and
// counted repetitions make it large from a short text (`(?:[a-z]{1000}){1000}` is 20 characters),
// so a pattern is measured before it is compiled. A pattern RE2 would refuse is measured as well as
// it can be; compiling it is what reports the error.

/** Instructions every program has besides its pattern's (match, the unanchored search's loop). */
const OVERHEAD = 4;

export function programBound(pattern: string): number {
  const reader = new Reader(pattern);
  let size = 0;
  // A `)` with no group open is an error RE2 reports; measuring goes on after it.
  while (!reader.done()) {
    size += reader.alternation();
    reader.at++;
  }
  return size + OVERHEAD;
}

class Reader {
  at = 0;
  constructor(private readonly text: string) {}

  done(): boolean {
    return this.at >= this.text.length;
  }

  /** Alternatives up to a `)` or the end: their sizes, and one instruction for each choice between them. */
  alternation(): number {
    let size = this.sequence();
    while (this.text[this.at] === '|') {
      this.at++;
      size += this.sequence() + 1;
    }
    return size;
  }

  private sequence(): number {
    let size = 0;
    while (!this.done() && this.text[this.at] !== '|' && this.text[this.at] !== ')') {
      let atom = this.atom();
      for (;;) {
        const repeated = this.quantifier(atom);
        if (repeated === undefined) break;
        atom = repeated;
      }
      size += atom;
    }
    return size;
  }

  /** The size of `atom` under the quantifier at the current place, or undefined when there is none. */
  private quantifier(atom: number): number | undefined {
    const c = this.text[this.at];
    let size: number;
    if (c === '*' || c === '+' || c === '?') {
      this.at++;
      size = atom + 2;
    } else if (c === '{') {
      const counted = /^\{(\d+)(,(\d*))?\}/.exec(this.text.slice(this.at, this.at + 24));
      // RE2 reads a `{` that starts no count as a literal.
      if (!counted) return undefined;
      this.at += counted[0].length;
      const min = Number(counted[1]);
      const max = counted[2] === undefined ? min : counted[3] === '' ? min + 1 : Number(counted[3]);
      size = (Math.max(min, max) + 1) * atom + 2;
    } else return undefined;
    if (this.text[this.at] === '?') this.at++;
    return size;
  }

  private atom(): number {
    const c = this.text[this.at];
    if (c === '(') return this.group();
    if (c === '[') return this.charClass();
    if (c === '\\') return this.escape();
    this.at++;
    return 1;
  }

  private group(): number {
    this.at++;
    let capture = 2;
    if (this.text[this.at] === '?') {
      const head = /^\?(?:P?<[^>]*>|[a-zA-Z-]*[:)])/.exec(this.text.slice(this.at, this.at + 80))?.[0] ?? '?';
      this.at += head.length;
      // Flags alone, as in (?i), change what follows and match nothing themselves.
      if (head.endsWith(')')) return 0;
      if (!head.includes('<')) capture = 0;
    }
    const size = this.alternation();
    if (this.text[this.at] === ')') this.at++;
    return size + capture;
  }

  /** A bracketed class is one instruction, however many ranges it holds. */
  private charClass(): number {
    this.at++;
    if (this.text[this.at] === '^') this.at++;
    if (this.text[this.at] === ']') this.at++;
    while (!this.done() && this.text[this.at] !== ']') {
      if (this.text[this.at] === '\\') this.at += 2;
      else if (this.text.startsWith('[:', this.at)) {
        const end = this.text.indexOf(':]', this.at + 2);
        this.at = end < 0 ? this.at + 1 : end + 2;
      } else this.at++;
    }
    this.at++;
    return 1;
  }

  private escape(): number {
    const next = this.text[this.at + 1];
    if (next === 'Q') {
      // \Q…\E: each character quoted is an instruction.
      const end = this.text.indexOf('\\E', this.at + 2);
      const stop = end < 0 ? this.text.length : end;
      const size = stop - (this.at + 2);
      this.at = end < 0 ? stop : end + 2;
      return size;
    }
    const long = /^\\(?:[pP]\{[^}]*\}|x\{[0-9a-fA-F]*\}|x[0-9a-fA-F]{2}|[0-7]{1,3}|[\s\S])/.exec(this.text.slice(this.at, this.at + 40));
    this.at += long ? long[0].length : 1;
    return 1;
  }
}
