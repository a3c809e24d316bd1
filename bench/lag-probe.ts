// Loaded into the Keel process under test (`node --import lag-probe.js`) by the adversarial bench:
// the event loop's delay, measured where it happens. On SIGUSR2 it writes the figures since the
// last signal to $BENCH_LAG_FILE (JSON, milliseconds) and starts over.
import { writeFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const file = process.env.BENCH_LAG_FILE;
if (file) {
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  process.on('SIGUSR2', () => {
    const ms = (ns: number) => ns / 1e6;
    const figures = { p50: ms(delay.percentile(50)), p99: ms(delay.percentile(99)), max: ms(delay.max), mean: ms(delay.mean), samples: delay.count, rssMiB: process.memoryUsage().rss / 2 ** 20 };
    writeFileSync(file, JSON.stringify(figures));
    delay.reset();
  });
}
