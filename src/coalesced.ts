/**
 * Runs a piece of async work one run at a time: a request made while it runs makes it run once
 * more when it ends (however many requests came meanwhile), never twice at once. The feeds use it
 * to read the store: each wake-up asks for a read, and a burst of them costs one or two reads.
 */
export class Coalesced {
  private active = false;
  private again = false;

  /**
   * `work` returns true when it should run again at once (it stopped at a page limit); `goOn` says
   * whether another run is still wanted (someone still listens); `settled` is told after the last
   * run, failed or not.
   */
  constructor(
    private readonly work: () => Promise<boolean | void>,
    private readonly hooks: { onError(err: unknown): void; goOn?(): boolean; settled?(): void },
  ) {}

  /** Whether a run is under way. */
  get running(): boolean {
    return this.active;
  }

  /** Runs the work now, or once more after the run under way. */
  readonly run = async (): Promise<void> => {
    if (this.active) {
      this.again = true;
      return;
    }
    this.active = true;
    try {
      do {
        this.again = false;
        if (await this.work()) this.again = true;
      } while (this.again && (this.hooks.goOn?.() ?? true));
    } catch (err) {
      this.hooks.onError(err);
    } finally {
      this.active = false;
      this.hooks.settled?.();
    }
  };
}
