/*
 * How a call booked ahead learns of a vendor pause set after its booking (docs/design.md, "A pause
 * set while calls are booked ahead"): lua/pause.lua announces each pause on the namespace's channel
 * (`<prefix>:<name>:paused`), which this process listens to, on the subscriber connection of its
 * wakes, while it holds slots booked ahead there. A call whose booking was asked after the
 * subscription was confirmed, the connection unbroken since, knows every pause set after its
 * booking from what was heard (`known`); any other reads the key's pause when its start comes.
 */

/** After the last slot booked ahead starts, the channel is listened to this much longer (ms): the next burst finds it listened to. */
const LINGER_MS = 2_000;
/** What was heard is kept this long (ms): a call booked longer ago reads the pause instead. */
const KEEP_MS = 60_000;
/** Keys heard of in a namespace above which those heard of only long ago are dropped. */
const SWEEP_ABOVE = 1_000;
/** A subscription that failed is not tried again before this much later (ms). */
const RETRY_MS = 5_000;

export interface PauseFeedDeps {
  /** The namespace's pause channel. */
  channel(namespace: string): string;
  /** Listens to a channel (lib/stores/redis-wakes.ts): resolves once subscribed, to a function that stops. */
  listen(channel: string, listener: (message: string) => void): Promise<() => void>;
  /** See `Wakes.liveSince`. */
  liveSince(channel: string): number | undefined;
}

interface Feed {
  readonly channel: string;
  /** Local time (`performance.now()`) until which this process holds slots booked ahead here. */
  until: number;
  stop: (() => void) | undefined;
  timer: NodeJS.Timeout | undefined;
  /** Per key, the pauses heard: when (local time) and their ends (store clock), oldest first. */
  readonly heard: Map<string, Array<{ readonly at: number; readonly end: number }>>;
}

/** The vendor pauses this process hears of, per namespace where it holds slots booked ahead. */
export class PauseFeeds {
  readonly #deps: PauseFeedDeps;
  readonly #feeds = new Map<string, Feed>();
  /** Per namespace, the local time before which a subscription that failed is not tried again. */
  readonly #retryAt = new Map<string, number>();
  #closed = false;

  constructor(deps: PauseFeedDeps) {
    this.#deps = deps;
  }

  /** This process holds a slot booked ahead in the namespace, starting `inMs` from now: the channel is listened to until a while after. */
  holds(namespace: string, inMs: number): void {
    if (this.#closed) return;
    const now = performance.now();
    let feed = this.#feeds.get(namespace);
    if (feed === undefined) {
      if (now < (this.#retryAt.get(namespace) ?? 0)) return;
      feed = { channel: this.#deps.channel(namespace), until: 0, stop: undefined, timer: undefined, heard: new Map() };
      this.#feeds.set(namespace, feed);
      this.#listen(namespace, feed);
    }
    feed.until = Math.max(feed.until, now + inMs);
  }

  /** This process set a pause (its end, store clock): known at once, as if heard. */
  heard(namespace: string, key: string, end: number): void {
    const feed = this.#feeds.get(namespace);
    if (feed !== undefined) this.#add(feed, key, end);
  }

  /**
   * The latest end (store clock) of the key's pauses heard since `since` (local time, a booking's
   * ask; 0 when none), if every pause set in Redis after a command sent then reached this process;
   * else undefined.
   */
  known(namespace: string, key: string, since: number): number | undefined {
    const feed = this.#feeds.get(namespace);
    if (feed === undefined) return undefined;
    const live = this.#deps.liveSince(feed.channel);
    if (live === undefined || since < live || since < performance.now() - KEEP_MS) return undefined;
    let end = 0;
    for (const pause of feed.heard.get(key) ?? []) if (pause.at >= since) end = Math.max(end, pause.end);
    return end;
  }

  close(): void {
    this.#closed = true;
    for (const namespace of [...this.#feeds.keys()]) this.#stop(namespace);
  }

  #listen(namespace: string, feed: Feed): void {
    this.#deps
      .listen(feed.channel, (message) => {
        const space = message.indexOf(' ');
        const end = Number(message.slice(0, space));
        // '' : the wakes' "anything may have been missed", which the connection's liveness tells here.
        if (space > 0 && Number.isFinite(end)) this.#add(feed, message.slice(space + 1), end);
      })
      .then(
        (stop) => {
          if (this.#feeds.get(namespace) === feed) feed.stop = stop;
          else stop();
        },
        () => {
          // Calls read the pause meanwhile.
          this.#retryAt.set(namespace, performance.now() + RETRY_MS);
          if (this.#feeds.get(namespace) === feed) this.#stop(namespace);
        },
      );
    this.#schedule(namespace, feed);
  }

  #schedule(namespace: string, feed: Feed): void {
    feed.timer = setTimeout(
      () => {
        if (performance.now() >= feed.until + LINGER_MS) this.#stop(namespace);
        else this.#schedule(namespace, feed);
      },
      Math.max(0, feed.until + LINGER_MS - performance.now()),
    );
    feed.timer.unref();
  }

  #stop(namespace: string): void {
    const feed = this.#feeds.get(namespace);
    if (feed === undefined) return;
    this.#feeds.delete(namespace);
    clearTimeout(feed.timer);
    feed.stop?.();
  }

  #add(feed: Feed, key: string, end: number): void {
    const now = performance.now();
    let pauses = feed.heard.get(key);
    if (pauses === undefined) feed.heard.set(key, (pauses = []));
    while (pauses.length > 0 && pauses[0]!.at < now - KEEP_MS) pauses.shift();
    pauses.push({ at: now, end });
    // Keys paused long ago go (pauses are rare: a sweep now and then).
    if (feed.heard.size > SWEEP_ABOVE) {
      for (const [other, list] of feed.heard) if (list[list.length - 1]!.at < now - KEEP_MS) feed.heard.delete(other);
    }
  }
}
