// A minimal server-sent-events client for tests: connects with fetch and yields parsed events.
import assert from 'node:assert/strict';
import { request as httpRequest, type IncomingMessage } from 'node:http';

export interface SseEvent {
  id?: string;
  event?: string;
  data: any;
}

export interface SseStream {
  /** Resolves with the next `count` events (in arrival order); rejects if the stream ends first. */
  take(count: number): Promise<SseEvent[]>;
  /** Resolves with the events up to and including the first one `stop` accepts. */
  takeUntil(stop: (event: SseEvent) => boolean): Promise<SseEvent[]>;
  /** Resolves with every event left once the server ends the stream. */
  rest(): Promise<SseEvent[]>;
  close(): void;
}

/** Parses complete SSE blocks off the front of `buffer`; returns the events and what is left. */
export function parseSse(buffer: string): { events: SseEvent[]; left: string } {
  const events: SseEvent[] = [];
  let cut: number;
  while ((cut = buffer.indexOf('\n\n')) >= 0) {
    const block = buffer.slice(0, cut);
    buffer = buffer.slice(cut + 2);
    const event: SseEvent = { data: undefined };
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const [field, ...rest] = line.split(':');
      const value = rest.join(':').replace(/^ /, '');
      if (field === 'id') event.id = value;
      else if (field === 'event') event.event = value;
      else if (field === 'data') event.data = JSON.parse(value);
    }
    if (event.data !== undefined) events.push(event);
  }
  return { events, left: buffer };
}

export async function openSse(url: string, headers: Record<string, string>): Promise<SseStream> {
  const controller = new AbortController();
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
  if (res.status !== 200) throw new Error(`watch answered ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let ended = false;
  const queue: SseEvent[] = [];
  const pull = async (): Promise<void> => {
    let chunk: { done: boolean; value?: Uint8Array };
    try {
      chunk = await reader.read();
    } catch {
      chunk = { done: true, value: undefined };
    }
    if (chunk.done) {
      ended = true;
      return;
    }
    const parsed = parseSse(buffer + decoder.decode(chunk.value, { stream: true }));
    buffer = parsed.left;
    queue.push(...parsed.events);
  };
  return {
    async take(count) {
      while (queue.length < count) {
        if (ended) throw new Error(`the stream ended after ${queue.length} of ${count} events`);
        await pull();
      }
      return queue.splice(0, count);
    },
    async takeUntil(stop) {
      for (;;) {
        const at = queue.findIndex(stop);
        if (at >= 0) return queue.splice(0, at + 1);
        if (ended) throw new Error(`the stream ended before the awaited event (${queue.length} events seen)`);
        await pull();
      }
    },
    async rest() {
      while (!ended) await pull();
      return queue.splice(0);
    },
    close() {
      controller.abort();
    },
  };
}

/**
 * Reads a stream that was left unread to its end and asserts how a slow client is cut: a last
 * `disconnect` event of reason `slow_consumer` naming `setting`, at the position of the last change
 * sent (`from` when none was). Gives the changes that were sent.
 */
export async function assertCutSlowConsumer(stream: IncomingMessage, from: number, setting: RegExp): Promise<SseEvent[]> {
  const text = await new Promise<string>((resolve) => {
    let all = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (all += chunk));
    stream.on('end', () => resolve(all));
    stream.resume();
  });
  const events = parseSse(text).events;
  const final = events[events.length - 1];
  assert.equal(final.event, 'disconnect');
  assert.equal(final.data.reason, 'slow_consumer');
  assert.match(final.data.message, setting);
  const sent = events.filter((e) => e.event === 'edit');
  assert.equal(sent[sent.length - 1]?.id ?? String(from), final.id, 'the position is that of the last event sent');
  return sent;
}

/** A watch stream opened with node:http, for tests that decide when (and whether) it is read. */
export function openRawStream(url: string, token: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } }, resolve);
    req.on('error', reject);
    req.end();
  });
}
