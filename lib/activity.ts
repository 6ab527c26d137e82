/**
 * What a throttle's process has under way, for `size`, `pending`, `onEmpty()` and `onIdle()` (the
 * p-queue habits): calls inside `schedule()`, and those of them whose `fn` runs.
 */
export class Activity {
  #calls = 0;
  #running = 0;
  #onEmpty: Array<() => void> = [];
  #onIdle: Array<() => void> = [];

  /** Calls waiting for a slot: in line, asking the store, or sleeping until their start. */
  get size(): number {
    return this.#calls - this.#running;
  }

  /** Calls whose `fn` runs. */
  get pending(): number {
    return this.#running;
  }

  /** A call entered `schedule()`. */
  entered(): void {
    this.#calls += 1;
  }

  /** A call got its slot: its `fn` starts. */
  started(): void {
    this.#running += 1;
    this.#settle();
  }

  /** A call's `fn` settled. */
  ran(): void {
    this.#running -= 1;
  }

  /** A call left `schedule()`, run or not. */
  left(): void {
    this.#calls -= 1;
    this.#settle();
  }

  /** Resolves once no call waits for a slot (`size` is 0; calls may still run). */
  onEmpty(): Promise<void> {
    if (this.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#onEmpty.push(resolve));
  }

  /** Resolves once there is no call at all: none waiting for a slot, none running. */
  onIdle(): Promise<void> {
    if (this.#calls === 0) return Promise.resolve();
    return new Promise((resolve) => this.#onIdle.push(resolve));
  }

  #settle(): void {
    if (this.size === 0 && this.#onEmpty.length > 0) for (const resolve of this.#onEmpty.splice(0)) resolve();
    if (this.#calls === 0 && this.#onIdle.length > 0) for (const resolve of this.#onIdle.splice(0)) resolve();
  }
}

/** Calls sleeping until their booked slot starts: per encoded key they count in, and in all. */
export class Sleeping {
  readonly #byKey = new Map<string, number>();
  #calls = 0;

  get calls(): number {
    return this.#calls;
  }

  /** Sleeping calls that count in the (encoded) key. */
  on(key: string): number {
    return this.#byKey.get(key) ?? 0;
  }

  enter(keys: readonly string[]): void {
    this.#calls += 1;
    for (const key of keys) this.#byKey.set(key, this.on(key) + 1);
  }

  leave(keys: readonly string[]): void {
    this.#calls -= 1;
    for (const key of keys) {
      const left = this.on(key) - 1;
      if (left === 0) this.#byKey.delete(key);
      else this.#byKey.set(key, left);
    }
  }
}
