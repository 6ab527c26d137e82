/**
 * The in-flight estimate: how long after its slot starts a call may still be on its way to the
 * vendor. Slots are booked with this hold and corrected to the real completion time once known.
 *
 * A call reaches the vendor after it starts and before its response is back. So the hold is the
 * longest start → response time among this throttle's last {@link SAMPLES} calls, plus
 * {@link START_SLACK_MS} for the start itself to be late (a busy event loop fires timers late),
 * floored at the safety margin and capped at `maxHoldMs`. The longest, not an average: a hold that is
 * too short sends the slots booked on it to book again when they are confirmed; one that is too long
 * only books later slots a little later. Exactness does not rest on it: a call past its estimate
 * without a completion counts as still in flight (docs/design.md §4).
 *
 * A call that wakes so late that `maxHoldMs` no longer covers it (lateness > `maxHoldMs` − longest
 * response) does not start: it gives its slot back and books a new one (see `Throttle`), since
 * decisions stop counting a call without a completion `maxHoldMs` after its estimate.
 */
export const SAMPLES = 64;
/** Start lag every hold allows on top of the longest observed response time. */
export const START_SLACK_MS = 20;

export class HoldEstimator {
  readonly #floor: number;
  readonly #cap: number;
  readonly #adaptive: boolean;
  readonly #samples = new Float64Array(SAMPLES);
  #count = 0;
  #max = 0;

  constructor(floorMs: number, capMs: number, adaptive: boolean) {
    this.#floor = floorMs;
    this.#cap = Math.max(floorMs, capMs);
    this.#adaptive = adaptive;
  }

  /** The hold to book the next slot with, in whole ms. */
  get holdMs(): number {
    if (!this.#adaptive || this.#count === 0) return this.#floor;
    return Math.ceil(Math.min(this.#cap, Math.max(this.#floor, this.#max + START_SLACK_MS)));
  }

  /** Longest recent start → response time (0 before any call completed, or when not adaptive). */
  get responseMs(): number {
    return this.#adaptive ? this.#max : 0;
  }

  /** Records one call's time from its start (fn invoked) to its completion. */
  observe(durationMs: number): void {
    if (!this.#adaptive || !(durationMs >= 0)) return;
    const slot = this.#count % SAMPLES;
    const evicted = this.#samples[slot]!;
    this.#samples[slot] = durationMs;
    this.#count++;
    if (durationMs >= this.#max) {
      this.#max = durationMs;
    } else if (evicted >= this.#max) {
      let max = 0;
      for (let i = Math.min(this.#count, SAMPLES) - 1; i >= 0; i--) if (this.#samples[i]! > max) max = this.#samples[i]!;
      this.#max = max;
    }
  }
}
