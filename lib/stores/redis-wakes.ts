import { StoreUnavailableError } from '../errors.js';
import { hearLateErrors } from './redis-scripts.js';

/** A subscriber connection (ioredis `duplicate()` of the user's client). */
interface Subscriber {
  subscribe(channel: string): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'error', listener: (error: unknown) => void): unknown;
  on(event: 'ready', listener: () => void): unknown;
  disconnect(): void;
  /** ioredis `Redis.stream`: its socket of the moment. */
  readonly stream?: unknown;
}

/**
 * The wakes a RedisStore's process hears: one channel per namespace and process, on a second
 * connection opened with the client's `duplicate()` the first time a decision waits, and closed
 * once no throttle listens any more. A completion publishes on the channel of the first process in
 * the key's waiting list only (lib/lua/includes/waiters.lua), so no other process hears it.
 */
export class Wakes {
  readonly #client: object;
  readonly #timed: <T>(promise: Promise<T>) => Promise<T>;
  #subscriber: Subscriber | undefined;
  readonly #channels = new Map<string, { readonly ready: Promise<unknown>; readonly listeners: Set<(key: string) => void> }>();
  #closed = false;

  /** `timed`: bounds the subscription by the store's command timeout. */
  constructor(client: object, timed: <T>(promise: Promise<T>) => Promise<T>) {
    this.#client = client;
    this.#timed = timed;
  }

  /** Calls `listener(key)` for every wake on `channel`; resolves once subscribed, to a function that stops. */
  async listen(channel: string, listener: (key: string) => void): Promise<() => void> {
    if (this.#closed) return () => undefined;
    let entry = this.#channels.get(channel);
    if (!entry) {
      const subscriber = this.#open();
      // A subscription that fails leaves waiters to their bounds; the next listen() tries again.
      const ready = this.#timed(subscriber.subscribe(channel)).catch((error: unknown) => {
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

  close(): void {
    this.#closed = true;
    this.#end();
    this.#channels.clear();
  }

  /** Closes the subscriber, if any. */
  #end(): void {
    const subscriber = this.#subscriber;
    if (subscriber === undefined) return;
    this.#subscriber = undefined;
    // Ended in the middle of a TLS handshake, its socket may still report an error: heard.
    hearLateErrors(subscriber);
    subscriber.disconnect();
  }

  #open(): Subscriber {
    if (this.#subscriber) return this.#subscriber;
    const duplicate = (this.#client as { duplicate?: () => Subscriber }).duplicate;
    if (typeof duplicate !== 'function') throw new StoreUnavailableError('The Redis client cannot open a subscriber connection (no duplicate())');
    const subscriber = duplicate.call(this.#client);
    subscriber.on('error', () => {
      // A lost subscriber reconnects on its own; waiters ask again at their bounds meanwhile.
      hearLateErrors(subscriber);
    });
    let connections = 0;
    subscriber.on('ready', () => {
      // Back after a disconnection (ioredis subscribes again by itself): announcements may have
      // been missed meanwhile, so every waiting call asks again.
      if (++connections === 1) return;
      for (const { listeners } of this.#channels.values()) for (const listener of listeners) listener('');
    });
    subscriber.on('message', (channel, key) => {
      // The key: this process is the first waiting on it (no other process hears the message).
      for (const listener of this.#channels.get(channel)?.listeners ?? []) listener(key);
    });
    this.#subscriber = subscriber;
    return subscriber;
  }
}
