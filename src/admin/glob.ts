// Globs where `*` stands for any characters, matched without backtracking: the text between the
// stars must appear in order, so each part is taken at its first place after the previous one
// (a later place could only leave less room for the rest). The work is one left-to-right search per
// part, whatever the number of stars.

export type Glob = (text: string) => boolean;

export function glob(pattern: string): Glob {
  const parts = pattern.split('*');
  if (parts.length === 1) return (text) => text === pattern;
  const first = parts[0];
  const last = parts[parts.length - 1];
  const middle = parts.slice(1, -1).filter((part) => part !== '');
  const fixed = first.length + last.length;
  return (text) => {
    if (text.length < fixed || !text.startsWith(first) || !text.endsWith(last)) return false;
    let at = first.length;
    const end = text.length - last.length;
    for (const part of middle) {
      const found = text.indexOf(part, at);
      if (found < 0 || found + part.length > end) return false;
      at = found + part.length;
    }
    return true;
  };
}
