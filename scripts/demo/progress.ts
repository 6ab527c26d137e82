/**
 * Progress of a demo run on stderr: a cli-progress bar (rate and ETA) when stderr is a terminal,
 * otherwise a plain line at every quarter of the batch and at the end.
 */
import cliProgress from 'cli-progress';

/** Runs `work`, showing `count()` (calls the vendor received so far) against `total` until it settles. */
export async function withProgress<T>(label: string, total: number, count: () => number, work: Promise<T>): Promise<T> {
  const started = performance.now();
  const elapsed = (): number => (performance.now() - started) / 1000;
  const rate = (value: number): string => (value / Math.max(elapsed(), 0.001)).toFixed(0);

  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        format: `  ${label.padEnd(9)} [{bar}] {value}/{total} calls | {rate} calls/s | {duration_formatted} elapsed | ETA {eta_formatted}`,
        stream: process.stderr,
        hideCursor: true,
        barsize: 30,
        etaBuffer: 50,
      },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0, { rate: '0' });
    const ticker = setInterval(() => {
      const value = count();
      bar.update(value, { rate: rate(value) });
    }, 200);
    try {
      return await work;
    } finally {
      clearInterval(ticker);
      const value = count();
      bar.update(value, { rate: rate(value) });
      bar.stop();
    }
  }

  let nextQuarter = 1;
  const line = (value: number): void => {
    process.stderr.write(`  ${label}: ${value}/${total} calls sent, ${elapsed().toFixed(1)} s, ${rate(value)} calls/s\n`);
  };
  const ticker = setInterval(() => {
    const value = count();
    if (nextQuarter < 4 && value < total && value >= (total * nextQuarter) / 4) {
      while (nextQuarter < 4 && value >= (total * nextQuarter) / 4) nextQuarter++;
      line(value);
    }
  }, 200);
  try {
    return await work;
  } finally {
    clearInterval(ticker);
    line(count());
  }
}
