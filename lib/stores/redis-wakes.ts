import type { StoreNotice } from '../store.js';
import type { ClientDriver, Subscriber } from './redis-client.js';

/**
 * The wakes a RedisStore's process hears: one channel per namespace and process, on a second
 * connection opened with the client's `duplicate()` the first time a decision waits, and closed
 * once no throttle listens any more, or once the client ends. A completion publishes on the channel
 * of the first process in the key's waiting list only (lib/lua/includes/waiters.lua), so no other
 * process hears it. The same connection hears the namespaces' vendor pauses (lib/stores/redis-pauses.ts),
 * which need to know since when a channel's messages all reach this process (`liveSince`).
 */
export class Wakes {
  readonly #client: ClientDriver;
  #subscriber: Subscriber | undefined;
  readonly #channels = new Map<string, Channel>();
  /** The client ended while channels were listened to: they are subscribed again once it is ready. */
  #resubscribe = false;
  #closed = false;
  /** Times the subscriber's connection was lost (or closed): a confirmation asked before the latest loss proves nothing. */
  #losses = 0;
  readonly #notify: (notice: StoreNotice) => void;
  /** A subscription asked again failed and none succeeded since: said once an episode. */
  #failing = false;

  /** `client`: opens the subscriber, and bounds each subscription by the store's command timeout; `notify`: the store's watchers (`subscribeFailed`). */
  constructor(client: ClientDriver, notify: (notice: StoreNotice) => void = () => undefined) {
    this.#client = client;
    this.#notify = notify;
  }

  /** Calls `listener(key)` for every wake on `channel`; resolves once subscribed, to a function that stops. */
  async listen(channel: string, listener: (key: string) => void): Promise<() => void> {
    if (this.#closed) return () => undefined;
    let entry = this.#channels.get(channel);
    if (!entry) {
      const subscriber = this.#open();
      const created: Channel = { ready: undefined!, listeners: new Set(), liveSince: undefined };
      // A subscription that fails leaves waiters to their bounds; the next listen() tries again.
      created.ready = this.#subscribe(subscriber, channel, created).catch((error: unknown) => {
        if (this.#channels.get(channel) === created) this.#channels.delete(channel);
        throw error;
      });
      this.#channels.set(channel, (entry = created));
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

  /**
   * `performance.now()` since which every message published on `channel` reaches this process: its
   * subscription was confirmed then, and its connection has not been lost since (a command sent
   * after this runs in Redis after the subscription). Undefined when not subscribed, or lost.
   */
  liveSince(channel: string): number | undefined {
    return this.#channels.get(channel)?.liveSince;
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
    // One that fails leaves waiters to their bounds, as a lost subscriber does: said (`subscribeFailed`).
    for (const [channel, entry] of this.#channels) this.#subscribe(subscriber, channel, entry).catch((error: unknown) => this.#failed(error));
    // Completions may have come before the subscription: every waiting call asks again.
    this.#wakeAll();
  }

  /** Subscribes `channel` on `subscriber`: live from the confirmation, if the subscriber is still the store's and nothing was lost since it was asked. */
  async #subscribe(subscriber: Subscriber, channel: string, entry: Channel): Promise<void> {
    const losses = this.#losses;
    await this.#client.timed(subscriber.subscribe(channel));
    this.#failing = false;
    if (this.#subscriber === subscriber && this.#losses === losses && this.#channels.get(channel) === entry) entry.liveSince ??= performance.now();
  }

  /**
   * A channel subscribed again (after a reconnection, or once the client is back) failed: its
   * waiters ask again at their bounds instead of being woken. Said once, until a subscription succeeds.
   */
  #failed(error: unknown): void {
    if (this.#failing || this.#closed) return;
    this.#failing = true;
    const why = error instanceof Error ? error.message : String(error);
    this.#notify({
      kind: 'subscribeFailed',
      error,
      message: `The store cannot subscribe again to its wake channels after a reconnection (${why}): until a subscription succeeds, waiting calls are not woken when slots free and ask again only at their bounds (calls wait longer), and vendor pauses announced meanwhile are missed. Check the Redis user may SUBSCRIBE (ACL &channels). Said once until then`,
    });
  }

  /** The subscriber's connection was lost: messages published from now on are missed until it is back and each channel subscribed again. */
  #lost(): void {
    this.#losses += 1;
    for (const entry of this.#channels.values()) entry.liveSince = undefined;
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
    this.#lost();
    subscriber.close();
  }

  #open(): Subscriber {
    this.#subscriber ??= this.#client.subscriber(
      (channel, key) => {
        // The key: this process is the first waiting on it (no other process hears the message).
        for (const listener of this.#channels.get(channel)?.listeners ?? []) listener(key);
      },
      // Announcements may have been missed while the subscriber was away: every waiting call asks
      // again, and each channel is subscribed again, to learn from when messages reach it again.
      () => {
        const subscriber = this.#subscriber;
        if (subscriber !== undefined)
          for (const [channel, entry] of this.#channels) this.#subscribe(subscriber, channel, entry).catch((error: unknown) => this.#failed(error));
        this.#wakeAll();
      },
      () => this.#lost(),
    );
    return this.#subscriber;
  }
}

/** A channel listened to. */
interface Channel {
  /** Settles once first subscribed (or failed to). */
  ready: Promise<unknown>;
  readonly listeners: Set<(key: string) => void>;
  /** See `Wakes.liveSince`. */
  liveSince: number | undefined;
}
