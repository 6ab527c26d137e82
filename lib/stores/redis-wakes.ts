import { StoreUnavailableError } from '../errors.js';
import { clientEnded, hearLateErrors } from './redis-scripts.js';

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

/** The user's client as the wakes use it: `duplicate()`, and whether it has ended. */
interface Client {
  duplicate?: () => Subscriber;
  readonly status?: string;
}

/**
 * The wakes a RedisStore's process hears: one channel per namespace and process, on a second
 * connection opened with the client's `duplicate()` the first time a decision waits, and closed
 * once no throttle listens any more, or once the client ends. A completion publishes on the channel
 * of the first process in the key's waiting list only (lib/lua/includes/waiters.lua), so no other
 * process hears it.
 */
export class Wakes {
  readonly #client: Client;
  readonly #timed: <T>(promise: Promise<T>) => Promise<T>;
  #subscriber: Subscriber | undefined;
  readonly #channels = new Map<string, { readonly ready: Promise<unknown>; readonly listeners: Set<(key: string) => void> }>();
  /** The client ended while channels were listened to: they are subscribed again once it is ready. */
  #resubscribe = false;
  #closed = false;

  /** `timed`: bounds the subscription by the store's command timeout. */
  constructor(client: object, timed: <T>(promise: Promise<T>) => Promise<T>) {
    this.#client = client as Client;
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
    for (const channel of this.#channels.keys()) this.#timed(subscriber.subscribe(channel)).catch(() => undefined);
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
    // Ended in the middle of a TLS handshake, its socket may still report an error: heard.
    hearLateErrors(subscriber);
    subscriber.disconnect();
  }

  #open(): Subscriber {
    if (this.#subscriber) return this.#subscriber;
    const duplicate = this.#client.duplicate;
    if (typeof duplicate !== 'function') throw new StoreUnavailableError('The Redis client cannot open a subscriber connection (no duplicate())');
    // A duplicate of a client that ended would be a connection of the store's own that nothing closes.
    if (this.#client.status === 'end') throw clientEnded();
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
      this.#wakeAll();
    });
    subscriber.on('message', (channel, key) => {
      // The key: this process is the first waiting on it (no other process hears the message).
      for (const listener of this.#channels.get(channel)?.listeners ?? []) listener(key);
    });
    this.#subscriber = subscriber;
    return subscriber;
  }
}
