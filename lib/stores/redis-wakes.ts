import type { ClientDriver, Subscriber } from './redis-client.js';

/**
 * The wakes a RedisStore's process hears: one channel per namespace and process, on a second
 * connection opened with the client's `duplicate()` the first time a decision waits, and closed
 * once no throttle listens any more, or once the client ends. A completion publishes on the channel
 * of the first process in the key's waiting list only (lib/lua/includes/waiters.lua), so no other
 * process hears it.
 */
export class Wakes {
  readonly #client: ClientDriver;
  #subscriber: Subscriber | undefined;
  readonly #channels = new Map<string, { readonly ready: Promise<unknown>; readonly listeners: Set<(key: string) => void> }>();
  /** The client ended while channels were listened to: they are subscribed again once it is ready. */
  #resubscribe = false;
  #closed = false;

  /** `client`: opens the subscriber, and bounds each subscription by the store's command timeout. */
  constructor(client: ClientDriver) {
    this.#client = client;
  }

  /** Calls `listener(key)` for every wake on `channel`; resolves once subscribed, to a function that stops. */
  async listen(channel: string, listener: (key: string) => void): Promise<() => void> {
    if (this.#closed) return () => undefined;
    let entry = this.#channels.get(channel);
    if (!entry) {
      const subscriber = this.#open();
      // A subscription that fails leaves waiters to their bounds; the next listen() tries again.
      const ready = this.#client.timed(subscriber.subscribe(channel)).catch((error: unknown) => {
        this.#channels.delete(channel);
        throw error;
      });
      this.#channels.set(channel, (entry = { ready, listeners: new Set() }));
    }
    entry.listeners.add(listener);
    const current = entry;
    await current.ready;
    return () => {
      current.listeners.delete(listener);
      if (current.listeners.size > 0 || this.#channels.get(channel) !== current) return;
      this.#channels.delete(channel);
      // No one listens any more (every throttle on the store closed): the subscriber goes, so that
      // it does not keep the process alive; the next wait opens one again.
      if (this.#channels.size === 0) this.#end();
    };
  }

  /** Wakes this process's listeners of `channel` for `key`, as a message would. */
  wake(channel: string, key: string): void {
    for (const listener of this.#channels.get(channel)?.listeners ?? []) listener(key);
  }

  /**
   * The user's client ended (`quit()`, `disconnect()`): the subscriber, the store's own, goes with
   * it, so that nothing of the store's keeps the process alive. Every waiting call asks again, and
   * fails at once (the client cannot send), instead of waiting for a wake that cannot come.
   */
  ended(): void {
    if (this.#closed) return;
    this.#resubscribe = this.#channels.size > 0;
    this.#end();
    this.#wakeAll();
  }

  /** The client is ready: after it ended, the channels still listened to are subscribed again, on a new subscriber. */
  ready(): void {
    if (!this.#resubscribe || this.#closed) return;
    this.#resubscribe = false;
    if (this.#channels.size === 0) return;
    const subscriber = this.#open();
    // One that fails leaves waiters to their bounds, as a lost subscriber does.
    for (const channel of this.#channels.keys()) this.#client.timed(subscriber.subscribe(channel)).catch(() => undefined);
    // Completions may have come before the subscription: every waiting call asks again.
    this.#wakeAll();
  }

  close(): void {
    this.#closed = true;
    this.#end();
    this.#channels.clear();
  }

  #wakeAll(): void {
    for (const { listeners } of this.#channels.values()) for (const listener of listeners) listener('');
  }

  /** Closes the subscriber, if any. */
  #end(): void {
    const subscriber = this.#subscriber;
    if (subscriber === undefined) return;
    this.#subscriber = undefined;
    subscriber.close();
  }

  #open(): Subscriber {
    this.#subscriber ??= this.#client.subscriber(
      (channel, key) => {
        // The key: this process is the first waiting on it (no other process hears the message).
        for (const listener of this.#channels.get(channel)?.listeners ?? []) listener(key);
      },
      // Announcements may have been missed while the subscriber was away: every waiting call asks again.
      () => this.#wakeAll(),
    );
    return this.#subscriber;
  }
}
