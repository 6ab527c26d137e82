/**
 * The in-flight estimate: how long after its slot starts a call may still be on its way to the
 * vendor. Slots are booked with this hold and corrected to the real completion time once known.
 *
 * Learned as the longest of the last {@link SAMPLES} observed "slot start → response" times of this
 * throttle (timer lag, queueing in the HTTP agent and the network all included), floored at the
 * safety margin and capped at `maxHoldMs`. The longest, not an average: a hold that is too short
 * lets a call count too briefly; one that is too long only books later slots a little later.
 */
export const SAMPLES = 64;

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
    return Math.ceil(Math.min(this.#cap, Math.max(this.#floor, this.#max)));
  }

  /** Records one call's time from its slot's start to its completion. */
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
