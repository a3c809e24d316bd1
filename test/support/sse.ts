// A minimal server-sent-events client for tests: connects with fetch and yields parsed events.
export interface SseEvent {
  id?: string;
  event?: string;
  data: any;
}

export interface SseStream {
  /** Resolves with the next `count` events (in arrival order). */
  take(count: number): Promise<SseEvent[]>;
  close(): void;
}

export async function openSse(url: string, headers: Record<string, string>): Promise<SseStream> {
  const controller = new AbortController();
  const res = await fetch(url, { headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
  if (res.status !== 200) throw new Error(`watch answered ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  const queue: SseEvent[] = [];
  const pull = async (): Promise<void> => {
    const { value, done } = await reader.read();
    if (done) throw new Error('the stream ended');
    buffer += decoder.decode(value, { stream: true });
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
      if (event.data !== undefined) queue.push(event);
    }
  };
  return {
    async take(count) {
      while (queue.length < count) await pull();
      return queue.splice(0, count);
    },
    close() {
      controller.abort();
    },
  };
}
