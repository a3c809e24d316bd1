// Token buckets by key, in bounded memory: the rate limits per principal and the failed-authentication limits.

/** Keys kept at most by one set of buckets: beyond it the least recently used go (a dropped bucket starts full again). */
const MAX_BUCKETS = 100_000;

/** Token buckets by key (`rate` per second, up to `capacity`), in bounded memory. */
export class Buckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  constructor(
    private readonly rate: number,
    private readonly capacity: number,
  ) {}

  private current(key: string): { tokens: number; at: number } {
    const now = Date.now();
    const bucket = this.buckets.get(key) ?? { tokens: this.capacity, at: now };
    bucket.tokens = Math.min(this.capacity, bucket.tokens + ((now - bucket.at) / 1000) * this.rate);
    bucket.at = now;
    // Re-inserted, so the map's order is least recently used first.
    this.buckets.delete(key);
    this.buckets.set(key, bucket);
    if (this.buckets.size > MAX_BUCKETS) {
      for (const old of this.buckets.keys()) {
        this.buckets.delete(old);
        if (this.buckets.size <= MAX_BUCKETS * 0.9) break;
      }
    }
    return bucket;
  }

  /** Seconds to wait before `key` has a token again, or 0 when it has one now (which is not taken). */
  wait(key: string): number {
    if (!this.buckets.has(key)) return 0; // a full bucket: not stored until a token is taken
    const bucket = this.current(key);
    return bucket.tokens >= 1 ? 0 : Math.ceil((1 - bucket.tokens) / this.rate);
  }

  /**
   * Takes `count` tokens if there are that many (all or none); otherwise answers the seconds to wait,
   * as wait() does. More than the capacity are never there: Infinity.
   */
  take(key: string, count = 1): number {
    if (count > this.capacity) return Infinity;
    const bucket = this.current(key);
    if (bucket.tokens < count) return Math.ceil((count - bucket.tokens) / this.rate);
    bucket.tokens -= count;
    return 0;
  }
}
