import { SingleBar } from 'cli-progress';

export interface ProgressOptions {
  /** Requests this run sends. */
  readonly total: number;
  /** Print nothing. */
  readonly quiet: boolean;
  /** Where to draw: a live bar on a terminal, else a plain line every `step` percent. */
  readonly stream: NodeJS.WriteStream;
  /** @default 10 */
  readonly step?: number;
}

/** Rate over the last this many ms. */
const RATE_WINDOW_MS = 10_000;

/**
 * Progress of a run on stderr: a live bar with rate and ETA (cli-progress) on a terminal; a plain
 * line every 10 % otherwise (logs, CI); nothing with `quiet`.
 */
export class Progress {
  readonly #options: ProgressOptions;
  readonly #bar: SingleBar | undefined;
  /** (time, results) pairs; the first is the last one at or before the start of the rate window. */
  readonly #samples: Array<{ at: number; done: number }> = [{ at: performance.now(), done: 0 }];
  #done = 0;
  #failed = 0;
  #refused = 0;
  #nextLine: number;

  constructor(options: ProgressOptions) {
    this.#options = options;
    const step = options.step ?? 10;
    this.#nextLine = step;
    if (!options.quiet && options.stream.isTTY && options.total > 0) {
      this.#bar = new SingleBar({
        stream: options.stream,
        format: '{bar} {percentage}% | {value}/{total} | {rate}/s | ETA {eta_text} | {failures}',
        barCompleteChar: '\u2588',
        barIncompleteChar: '\u2591',
        hideCursor: true,
        fps: 5,
      });
      this.#bar.start(options.total, 0, this.#payload());
    }
  }

  /** One more result: a success, a failure, or a request refused by `--max-wait` (not sent). */
  tick(outcome: 'ok' | 'failed' | 'refused'): void {
    this.#done += 1;
    if (outcome === 'failed') this.#failed += 1;
    else if (outcome === 'refused') this.#refused += 1;
    const now = performance.now();
    this.#samples.push({ at: now, done: this.#done });
    while (this.#samples.length > 1 && this.#samples[1]!.at <= now - RATE_WINDOW_MS) this.#samples.shift();
    if (this.#bar) {
      this.#bar.update(this.#done, this.#payload());
      return;
    }
    if (this.#options.quiet || this.#options.total === 0) return;
    const percent = (100 * this.#done) / this.#options.total;
    if (percent + 1e-9 < this.#nextLine && this.#done < this.#options.total) return;
    const step = this.#options.step ?? 10;
    while (this.#nextLine <= percent + 1e-9) this.#nextLine += step;
    const { rate, eta_text: eta, failures } = this.#payload();
    this.#options.stream.write(`vendor-throttle: ${Math.floor(percent)}% (${this.#done}/${this.#options.total}), ${rate}/s, ETA ${eta}, ${failures}\n`);
  }

  /** Removes the bar (leaving its last state on screen). */
  stop(): void {
    this.#bar?.stop();
  }

  /** Results per second over the last 10 s. */
  rate(): number {
    const now = performance.now();
    const anchor = this.#samples[0]!;
    return now > anchor.at ? (1000 * (this.#done - anchor.done)) / (now - anchor.at) : 0;
  }

  #payload(): { rate: string; eta_text: string; failures: string } {
    const rate = this.rate();
    const left = this.#options.total - this.#done;
    // Refusals only when there are some: most runs have no --max-wait.
    const failures = `${this.#failed} failed${this.#refused > 0 ? `, ${this.#refused} refused` : ''}`;
    return { rate: rate.toFixed(1), eta_text: left === 0 ? '0 s' : rate > 0 ? formatSeconds(left / rate) : '?', failures };
  }
}

/** `0.4 s`, `8 s`, `2 min 5 s`, `1 h 3 min`. */
export function formatSeconds(seconds: number): string {
  if (seconds < 9.95) return `${seconds.toFixed(1)} s`;
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
