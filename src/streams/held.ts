// Bytes written to watch streams that their clients have not read yet, counted server-wide. Each
// stream is written to until it holds watchBufferBytes; all of them together may hold
// watchBufferTotalBytes. Over the total, streams are cut (as slow consumers, told where to resume)
// until the rest fit: first those whose clients have been behind longest, then those holding the
// most, so many slow readers cost the server a bounded amount of memory, and a reader that keeps up
// is not cut for others' sake.

/** A stream as the budget sees it. */
export interface Holder {
  /** Bytes it holds now (written, not yet taken by its client). */
  held(): number;
  /** Since when its client has been too far behind to be written to, if it is. */
  behindSince(): number | undefined;
  /** Ends it as a slow consumer. */
  cut(): void;
}

export class HeldBytes {
  private readonly holders = new Map<Holder, number>();
  private total = 0;

  constructor(readonly budget: number) {}

  /** Records what `holder` holds after a write, and cuts the largest holders while the total is over the budget. */
  update(holder: Holder): void {
    this.record(holder, holder.held());
    if (this.total <= this.budget) return;
    // A stream's recorded bytes go stale as its client reads (nothing tells the budget): read them all again first.
    for (const other of this.holders.keys()) this.record(other, other.held());
    while (this.total > this.budget && this.holders.size > 0) {
      let first: Holder | undefined;
      let since = Infinity;
      let most = -1;
      for (const [h, bytes] of this.holders) {
        const behind = h.behindSince() ?? Infinity;
        if (behind < since || (behind === since && bytes > most)) [first, since, most] = [h, behind, bytes];
      }
      this.forget(first!);
      first!.cut();
    }
  }

  /** The stream ended: what it held is no longer counted. */
  forget(holder: Holder): void {
    this.total -= this.holders.get(holder) ?? 0;
    this.holders.delete(holder);
  }

  /** Bytes held by every stream, as last recorded. */
  get bytes(): number {
    return this.total;
  }

  private record(holder: Holder, bytes: number): void {
    this.total += bytes - (this.holders.get(holder) ?? 0);
    this.holders.set(holder, bytes);
  }
}
