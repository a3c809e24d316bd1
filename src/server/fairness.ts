import type { FastifyContextConfig, FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { sendError } from './errors.js';
import { identityOf, whenRequestEnds } from './limits.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's place in the scheduler: its level and principal, then its seat (see installFairness). */
    admission?: Admission;
  }
  interface FastifyContextConfig {
    /** A list or query (`lists`), or a history, audit or log read (`longReads`): it runs in that level. */
    level?: HeavyLevel;
  }
}

/** Also the options of its seat's acquire (see PriorityLevel.acquire): none are made per request. */
class Admission {
  release?: Release = undefined;
  withdraw?: () => void = undefined;
  over = false;
  constructor(
    readonly level: Level,
    readonly who: string,
  ) {}

  onQueued(withdraw: () => void): void {
    this.withdraw = withdraw;
  }
}

/**
 * What a piece of work is, for sharing the server among callers (in the spirit of Kubernetes' API
 * Priority and Fairness). `exempt` work (the first org's superusers, health checks) is never held;
 * each other level has its own seats, so a flood of one kind of work cannot take the seats of another:
 * history readers or watch replays do not make a caller's list wait, nor heavy queries a replay.
 */
export type Level = 'mutations' | 'reads' | 'lists' | 'longReads';

/** The levels whose work runs off the request thread (list workers, a pool of their own). */
export type HeavyLevel = 'lists' | 'longReads';

export interface LevelLimits {
  /** Pieces of work of the level running at once, server-wide (this process). */
  seats: number;
  /** Seats besides those, only for short work (see PriorityLevel). */
  shortSeats: number;
  /** Of the seats (not the short ones), how many may hold heavy work at once: work whose principal's typical cost is at least `heavyMs`. */
  heavySeats: number;
  heavyMs: number;
  /** Pieces of work one principal may have waiting for a seat; more are refused with 429. */
  queued: number;
  /** The setting names an operator changes, for the refusal's message. */
  seatsSetting: string;
  queuedSetting: string;
}

/** Retry-After, in seconds, of a refusal for a full queue. */
const RETRY_AFTER_S = 1;

/** A held seat: give it back exactly once, when the work is over. */
export type Release = () => void;

interface Waiting {
  flow: Flow;
  start: (release: Release) => void;
}

/** Work is short when its principal's typical cost is at most this share of the mean of the active principals' costs. */
const SHORT_SHARE = 0.5;

/**
 * Work is heavy only when its principal's typical cost is also at least this share of that mean: on a
 * machine loaded enough to stretch every list's seat time past `heavyMs`, a caller whose lists are a
 * fraction of what the heavy queries around it hold is still not one of them.
 */
const HEAVY_SHARE = 0.5;

/** The level's seats for any work (0) and those kept for short work (1): each with its own virtual time. */
type Lane = 0 | 1;

/** One principal's work at one level. */
interface Flow {
  who: string;
  queue: Waiting[];
  running: number;
  /** Where this principal's next piece of work starts, in each lane's virtual time: the seat-time it has been given there so far. */
  finish: [number, number];
  /**
   * The finish tag of the work at the head of its line, in each lane, fixed when first compared: were
   * it computed again at each dispatch from the moving virtual time, a principal whose work costs more
   * would stay behind cheaper principals' backlogs for as long as they last.
   */
  headTag: [number | undefined, number | undefined];
}

/** Principals whose typical cost a level remembers after they go idle (the least recently seen are forgotten first). */
const REMEMBERED_COSTS = 10_000;

/**
 * One priority level: `seats` pieces of work at once; when they are taken, work waits in its
 * principal's queue, and each freed seat goes by weighted fair queuing, with virtual time in
 * seat-milliseconds. A principal's next piece of work is tagged to finish at (where it stands) + (what
 * its work usually costs), and the smallest tag goes first; when it ends, the principal is charged what
 * it really held. So N busy principals each get about 1/N of the seat-time however many requests each
 * sends or however heavy they are, a lone caller gets every seat, and between two principals that
 * stand level, a caller whose lists take two milliseconds goes before one whose queries hold a seat for
 * a quarter second. A principal that starts asking is placed at the current virtual time: idle time
 * banks no credit, and a swarm's backlog does not push it back. One whose cost is not known yet is
 * assumed to cost what the level's work costs on average, so fresh keys earn no head start.
 *
 * Fair order alone still leaves a short piece of work waiting for a seat to come free, and when
 * every seat holds a heavy query or a replay's chunk that is the whole of a quarter second. So a level
 * may keep `shortSeats` more seats for short work only: work whose principal's typical cost is at
 * most half the mean of the principals' now asking. Those seats are never taken by the heavy work that
 * makes the others wait, so a caller whose lists take milliseconds is answered in milliseconds however
 * many principals hold the other seats with heavy work. They are shared by weighted fair queuing too,
 * in a virtual time of their own: what a principal is given there does not cost it its turn at the
 * other seats. A key that slips a heavy query into a short seat after cheap calls is charged what it
 * held, and is no longer short for its next ones.
 *
 * Heavy work (a principal's typical cost at least `heavyMs`, and at least half the mean of the
 * principals' now asking) may hold only `heavySeats` of the seats
 * at once. Seat-time is not the only thing shared: a heavy query keeps a core busy (in a list worker,
 * or in PostgreSQL on the same machine), and on a small machine two of them leave nothing for the
 * request thread and everyone else's lists; the other seats then take lighter work, and heavy work
 * waits its fair turn for the heavy ones.
 */
export class PriorityLevel {
  /** Work running in each lane. */
  private readonly running: [number, number] = [0, 0];
  /** Heavy work running in lane 0. */
  private heavyRunning = 0;
  private readonly seats: [number, number];
  private waiting = 0;
  private readonly flows = new Map<string, Flow>();
  /** The start tag of the work dispatched last, in each lane. */
  private readonly virtualTime: [number, number] = [0, 0];
  /** What the level's work costs on average (ms, a moving average). */
  private averageMs = 1;
  /** What each recently seen principal's work costs (ms, a moving average), in least recently seen order. */
  private readonly costs = new Map<string, number>();
  /** The principal `costs` saw last (its last key). */
  private lastCosted?: string;

  constructor(
    readonly name: Level,
    private readonly limits: LevelLimits,
  ) {
    this.seats = [limits.seats, limits.shortSeats];
  }

  /**
   * Takes a seat for `who`'s work: the release at once when a seat is free and nobody waits, else
   * a promise of it. Over the principal's queue, an ApiError 429 is thrown, unless `mustWait` (work
   * already under way that cannot be refused, such as the next chunk of an open watch's replay).
   * `onQueued` is given a function that withdraws the work from its queue (its client went away).
   */
  acquire(who: string, options: { mustWait?: boolean; onQueued?: (withdraw: () => void) => void } = {}): Release | Promise<Release> {
    let flow = this.flows.get(who);
    if (!flow) this.flows.set(who, (flow = { who, queue: [], running: 0, finish: [this.virtualTime[0], this.virtualTime[1]], headTag: [undefined, undefined] }));
    if (this.waiting === 0 && this.running[0] < this.seats[0]) {
      const heavy = this.isHeavy(who);
      if (this.mayStart(heavy)) return this.dispatch(flow, 0, heavy);
    }
    if (this.running[1] < this.seats[1]) {
      const short = this.shortBelow();
      if (this.isShort(who, short) && !this.shortWaiting(short)) return this.dispatch(flow, 1, false);
    }
    if (!options.mustWait && flow.queue.length >= queuedFor(who, this.limits.queued)) {
      this.forgetIfIdle(flow);
      throw this.refusal(flow);
    }
    const queuedFlow = flow;
    return new Promise<Release>((start) => {
      const entry: Waiting = { flow: queuedFlow, start };
      queuedFlow.queue.push(entry);
      this.waiting++;
      // A seat may be free while only heavy work waited for the heavy seats: this work may take it.
      if (this.running[0] < this.seats[0]) this.next();
      options.onQueued?.(() => {
        const at = queuedFlow.queue.indexOf(entry);
        if (at < 0) return;
        queuedFlow.queue.splice(at, 1);
        if (at === 0) queuedFlow.headTag = [undefined, undefined];
        this.waiting--;
        this.forgetIfIdle(queuedFlow);
      });
    });
  }

  /** Whether `who` could not queue one more piece of work now (checked before a body is read, so a refused caller sends none). */
  full(who: string): boolean {
    // Heavy work waits while a seat is free if the heavy seats are taken: its line is as full then.
    return (this.running[0] >= this.seats[0] || !this.mayStart(this.isHeavy(who))) && (this.flows.get(who)?.queue.length ?? 0) >= queuedFor(who, this.limits.queued);
  }

  /** The 429 a principal whose queue is full gets. */
  refusal(flow?: Flow): ApiError {
    const queued = flow?.queue.length ?? this.limits.queued;
    return new ApiError(
      'rate_limited',
      `the server's ${this.limits.seats} seats for ${LEVEL_WORDS[this.name]} are taken and this caller already has ${queued} waiting (${this.limits.seatsSetting}, ${this.limits.queuedSetting}); retry after ${RETRY_AFTER_S} s`,
      { retryAfter: RETRY_AFTER_S },
    );
  }

  /** Whether `who`'s work is heavy; `mean` (the active principals' mean cost) is worked out only when its cost is at least `heavyMs`. */
  private isHeavy(who: string, mean?: number): boolean {
    const cost = this.costOf(who);
    return cost >= this.limits.heavyMs && cost >= (mean ?? this.meanCost()) * HEAVY_SHARE;
  }

  /** Whether work may take a seat of lane 0 now (heavy work only while a heavy seat is free). */
  private mayStart(heavy: boolean): boolean {
    return !heavy || this.heavyRunning < this.limits.heavySeats;
  }

  private costOf(who: string): number {
    return this.costs.get(who) ?? this.averageMs;
  }

  /** The mean cost of the principals running or waiting. */
  private meanCost(): number {
    let sum = 0;
    for (const flow of this.flows.values()) sum += this.costOf(flow.who);
    return this.flows.size === 0 ? 0 : sum / this.flows.size;
  }

  /** The cost at or below which work is short now. */
  private shortBelow(): number {
    return this.meanCost() * SHORT_SHARE;
  }

  /** Whether short work waits (then a newcomer must not pass it for a short seat). */
  private shortWaiting(short: number): boolean {
    if (this.waiting === 0) return false;
    for (const flow of this.flows.values()) if (flow.queue.length > 0 && this.isShort(flow.who, short)) return true;
    return false;
  }

  /** A principal whose cost is not known yet is not short: a swarm of fresh keys cannot take the short seats with heavy work. */
  private isShort(who: string, short: number): boolean {
    const known = this.costs.get(who);
    return known !== undefined && known <= short;
  }

  private dispatch(flow: Flow, lane: Lane, heavy: boolean): Release {
    const startTag = Math.max(flow.finish[lane], this.virtualTime[lane]);
    const charged = this.costOf(flow.who);
    if (heavy) this.heavyRunning++;
    flow.finish[lane] = startTag + charged;
    // Self-clocked: the virtual time is the finish tag of the work last started, so a principal that
    // starts asking goes right after the work whose tags were already below it, not a round later.
    this.virtualTime[lane] = Math.max(this.virtualTime[lane], flow.finish[lane]);
    flow.running++;
    this.running[lane]++;
    const began = performance.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const spent = Math.max(0.1, performance.now() - began);
      flow.finish[lane] += spent - charged;
      this.averageMs = this.averageMs * 0.9 + spent * 0.1;
      this.remember(flow.who, spent);
      flow.running--;
      this.running[lane]--;
      if (heavy) this.heavyRunning--;
      this.forgetIfIdle(flow);
      this.next();
    };
  }

  private remember(who: string, spent: number): void {
    const known = this.costs.get(who);
    // Moved last by deleting and setting it again, unless it is last already (one caller's requests
    // one after another): then the map deletes nothing, which would cost a request more than the rest.
    if (who !== this.lastCosted) {
      this.costs.delete(who);
      this.lastCosted = who;
    }
    this.costs.set(who, known === undefined ? spent : (known + spent) / 2);
    if (this.costs.size > REMEMBERED_COSTS) this.costs.delete(this.costs.keys().next().value!);
  }

  /** Gives free seats to the waiting work with the smallest finish tags; free short seats to the short work among it. */
  private next(): void {
    while (this.waiting > 0 && this.running[0] < this.seats[0]) if (!this.startNext(0, 0)) break;
    if (this.waiting === 0 || this.running[1] >= this.seats[1]) return;
    const short = this.shortBelow();
    while (this.waiting > 0 && this.running[1] < this.seats[1]) if (!this.startNext(1, short)) return;
  }

  /** Starts the waiting work with the smallest tag in the lane (in the short lane, of a principal whose cost is at most `short`; in the other, heavy work only while a heavy seat is free). */
  private startNext(lane: Lane, short: number): boolean {
    let chosen: Flow | undefined;
    let chosenTag = Infinity;
    let chosenHeavy = false;
    let mean: number | undefined;
    for (const flow of this.flows.values()) {
      if (flow.queue.length === 0) continue;
      const heavy = lane === 0 && this.costOf(flow.who) >= this.limits.heavyMs && this.isHeavy(flow.who, (mean ??= this.meanCost()));
      if (lane === 1 ? !this.isShort(flow.who, short) : !this.mayStart(heavy)) continue;
      const tag = (flow.headTag[lane] ??= Math.max(flow.finish[lane], this.virtualTime[lane]) + this.costOf(flow.who));
      if (tag < chosenTag) {
        chosen = flow;
        chosenTag = tag;
        chosenHeavy = heavy;
      }
    }
    if (!chosen) return false;
    const entry = chosen.queue.shift()!;
    chosen.headTag = [undefined, undefined];
    this.waiting--;
    // Started on a later turn of the event loop: seats handed on one after another in promise
    // continuations would run every waiting piece of work in this one turn, ahead of all I/O.
    setImmediate(entry.start, this.dispatch(chosen, lane, chosenHeavy));
    return true;
  }

  /** A principal with nothing running or waiting is forgotten but for its typical cost (memory stays bounded by the active ones). */
  private forgetIfIdle(flow: Flow): void {
    if (flow.running === 0 && flow.queue.length === 0) this.flows.delete(flow.who);
  }
}

/** A caller without a valid credential waits in its address's line, a quarter as long as a principal's. */
const ADDRESS_SHARE = 4;

/** How much work `who` may have waiting at a level whose principals may have `queued`. */
function queuedFor(who: string, queued: number): number {
  return who.startsWith('ip:') ? Math.max(1, Math.floor(queued / ADDRESS_SHARE)) : queued;
}

const LEVEL_WORDS: Record<Level, string> = { mutations: 'changes', reads: 'reads', lists: 'lists and queries', longReads: 'history, audit and log reads and watch replays' };

/** Every priority level of this process; one scheduler shared by both APIs and the watch. */
export class Scheduler {
  readonly levels: Record<Level, PriorityLevel>;

  constructor(limits: Record<Level, LevelLimits>) {
    this.levels = {
      mutations: new PriorityLevel('mutations', limits.mutations),
      reads: new PriorityLevel('reads', limits.reads),
      lists: new PriorityLevel('lists', limits.lists),
      longReads: new PriorityLevel('longReads', limits.longReads),
    };
  }

  /** Runs `work` in a seat of `level` for `who`, waiting its fair turn (see PriorityLevel.acquire). */
  async run<T>(level: Level, who: string, work: () => Promise<T>, options: { mustWait?: boolean } = {}): Promise<T> {
    const seat = this.levels[level].acquire(who, options);
    const release = seat instanceof Promise ? await seat : seat;
    try {
      return await work();
    } finally {
      release();
    }
  }
}

/** Work usually taking this share of the query budget or more is heavy (see PriorityLevel). */
const HEAVY_SHARE_OF_BUDGET = 0.25;

/** The levels' seats and queues from the settings. */
export function schedulerOf(config: Config): Scheduler {
  const unbounded = { heavySeats: Infinity, heavyMs: Infinity };
  const heavy = { heavySeats: config.heavyReadSeats, heavyMs: config.queryBudgetMs * HEAVY_SHARE_OF_BUDGET };
  return new Scheduler({
    mutations: { seats: config.maxMutationsInFlight, shortSeats: 0, ...unbounded, queued: config.mutationsQueuedPerPrincipal, seatsSetting: 'maxMutationsInFlight', queuedSetting: 'mutationsQueuedPerPrincipal' },
    reads: { seats: config.maxReadsInFlight, shortSeats: 0, ...unbounded, queued: config.readsQueuedPerPrincipal, seatsSetting: 'maxReadsInFlight', queuedSetting: 'readsQueuedPerPrincipal' },
    lists: { seats: config.maxListsInFlight, shortSeats: config.shortReadSeats, ...heavy, queued: config.listsQueuedPerPrincipal, seatsSetting: 'maxListsInFlight', queuedSetting: 'listsQueuedPerPrincipal' },
    longReads: { seats: config.maxLongReadsInFlight, shortSeats: config.shortReadSeats, ...heavy, queued: config.longReadsQueuedPerPrincipal, seatsSetting: 'maxLongReadsInFlight', queuedSetting: 'longReadsQueuedPerPrincipal' },
  });
}

const READ_METHODS = new Set(['GET', 'HEAD']);

/** The level a request of `method` to a route of `config` waits and runs in. */
export function levelOf(method: string, config: FastifyContextConfig | undefined): Level {
  return config?.level ?? (READ_METHODS.has(method) ? 'reads' : 'mutations');
}

/**
 * Every request (but streams, which schedule their own reads) waits for a seat of its level before
 * its handler runs. The level is chosen once the caller is known: a principal, or the address of a
 * caller without a valid credential (public routes, the registry's token endpoint), whose line is a
 * quarter as long. The first org's superusers (see installPrincipalAdmission) are never held; a caller
 * whose queue at that level is already full is refused at once, before its body is read. The seat itself
 * is taken only once the body has arrived, so a client that sends its body slowly holds no seat that
 * another caller's work needs; it is given back when the response is done or the client goes away.
 */
export function installFairness(app: FastifyInstance, scheduler: Scheduler): void {
  app.decorateRequest('admission');
  app.addHook('onRequest', (request, reply, done) => {
    // Not counted: a stream, or a request refused before it runs. Exempt: never held.
    if (!request.counted || request.exempt || request.routeConfig?.seatless) return done();
    const level = levelOf(request.method, request.routeConfig);
    const who = identityOf(request.principal, request.ip);
    if (scheduler.levels[level].full(who)) return sendError(reply, request, scheduler.levels[level].refusal());
    request.admission = new Admission(level, who);
    done();
  });
  app.addHook('preValidation', (request, _reply, done) => {
    const admission = request.admission;
    if (!admission) return done();
    // A route that reads its body itself (the registry's uploads) would hold the seat while the body
    // arrives: its cost is that body, bounded by the caps on bodies (see installPrincipalAdmission).
    if (request.bodyPending) {
      request.admission = undefined;
      return done();
    }
    // Its client went away before it got here (an abort seen before the admission was made is not
    // seen again): there is nothing to run for it, and a seat taken now might never be given back.
    if (admission.over || request.raw.socket?.destroyed) return;
    let seat: Release | Promise<Release>;
    try {
      seat = scheduler.levels[admission.level].acquire(admission.who, admission);
    } catch (err) {
      return done(err as ApiError);
    }
    // However the response ends (answered, or its connection closed under it), the seat comes back (see whenRequestEnds).
    if (!(seat instanceof Promise)) {
      admission.release = seat;
      return done();
    }
    seat.then((release) => {
      admission.withdraw = undefined;
      // Its client went away (or it timed out) as the seat came: the seat goes to the next at once.
      if (admission.over) return release();
      admission.release = release;
      done();
    });
  });
  const end = (request: FastifyRequest) => {
    const admission = request.admission;
    if (!admission || admission.over) return;
    admission.over = true;
    admission.withdraw?.();
    admission.release?.();
  };
  whenRequestEnds(app, end);
}
