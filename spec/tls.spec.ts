/**
 * RedisStore over TLS: a redis-server this spec starts with a TLS port (the test certificates in
 * spec/support/tls), an ioredis client that trusts the test CA, and a throttle in each mode, with
 * recovery after a data loss. The store sends nothing that differs under TLS; this proves the
 * scripts, batching and the heartbeat run over such a connection as they do in the clear.
 *
 * The certificates (valid until 2126) were made with:
 *   openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 36500 -subj "/CN=vendor-throttle test CA"
 *   openssl req -newkey rsa:2048 -nodes -keyout redis.key -out redis.csr -subj "/CN=localhost"
 *   openssl x509 -req -in redis.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out redis.crt -days 36500 \
 *     -extfile <(printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
 * (the CA key was then deleted).
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { RateLimitedError, RedisStore, StoreUnavailableError, Throttle, type ThrottleMode } from '../lib/index.js';
import { freePort, startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { redisStore, uniquePrefix } from './support/hooks.js';

const certificate = (name: string): string => fileURLToPath(new URL(`./support/tls/${name}`, import.meta.url));

describe('RedisStore over TLS', function () {
  this.timeout(20_000);
  let server: RedisServer;
  let tlsPort: number;
  const clients: Redis[] = [];

  before(async () => {
    tlsPort = await freePort();
    server = await startRedis({
      args: [
        '--tls-port',
        String(tlsPort),
        '--tls-cert-file',
        certificate('redis.crt'),
        '--tls-key-file',
        certificate('redis.key'),
        '--tls-ca-cert-file',
        certificate('ca.crt'),
        '--tls-auth-clients',
        'no',
      ],
    });
  });

  after(async () => {
    await Promise.allSettled(clients.splice(0).map((client) => client.quit()));
    await server?.stop();
  });

  function tlsClient(options: { trusted?: boolean } = {}): Redis {
    const client = new Redis({
      host: '127.0.0.1',
      port: tlsPort,
      tls: options.trusted === false ? { servername: 'localhost' } : { ca: readFileSync(certificate('ca.crt')), servername: 'localhost' },
      maxRetriesPerRequest: 0,
      retryStrategy: options.trusted === false ? () => null : undefined,
      lazyConnect: true,
    });
    client.on('error', () => {});
    clients.push(client);
    return client;
  }

  it('connects only to a client that trusts the server certificate (the port really speaks TLS)', async () => {
    const trusted = tlsClient();
    await trusted.connect();
    expect(await trusted.ping()).to.equal('PONG');
    // Without the CA, the handshake fails on the certificate (ioredis reports it as an 'error' event).
    const untrusted = tlsClient({ trusted: false });
    const reported: unknown[] = [];
    untrusted.on('error', (error: unknown) => reported.push(error));
    const failed = await untrusted.connect().then(
      () => false,
      () => true,
    );
    expect(failed).to.equal(true);
    expect(reported.map(String).join('\n')).to.match(/self[- ]signed|unable to (get|verify)/i);
  });

  it("ending the store's subscriber in the middle of a handshake the client refuses raises no uncaught error", async () => {
    // disconnect() cuts the handshake short: the socket fails its certificate check, then the
    // server's alert to the cut handshake ('tlsv1 alert decode error') may arrive after ioredis
    // stopped listening to it. Whether it comes is a race; what it meets is not: the subscriber's
    // socket, once the store closed it, emits both errors here, and an error nobody hears throws.
    const client = new Redis({ host: '127.0.0.1', port: tlsPort, tls: { servername: 'localhost' }, lazyConnect: true });
    client.on('error', () => {});
    clients.push(client);
    const duplicate = client.duplicate.bind(client);
    const subscribers: Redis[] = [];
    client.duplicate = (...args) => {
      const subscriber = duplicate(...args);
      subscribers.push(subscriber);
      return subscriber;
    };
    const store = new RedisStore(client, { commandTimeoutMs: 1_000 });
    // Opens the subscriber, which starts its handshake; close() ends it once its socket is there.
    const listening = store.listen('acme', () => undefined).catch(() => undefined);
    while ((subscribers[0] as { stream?: EventEmitter } | undefined)?.stream === undefined) await new Promise((resolve) => setImmediate(resolve));
    const socket = (subscribers[0] as unknown as { stream: EventEmitter }).stream;
    expect(subscribers[0]!.status, 'the handshake is under way').to.equal('connecting');
    await store.close();
    await listening;
    expect(subscribers).to.have.length(1);
    expect(subscribers[0]!.status).to.equal('end');
    expect(() => {
      socket.emit('error', Object.assign(new Error('self-signed certificate in certificate chain'), { code: 'SELF_SIGNED_CERT_IN_CHAIN' }));
      socket.emit('error', Object.assign(new Error('tlsv1 alert decode error'), { code: 'ERR_SSL_TLSV1_ALERT_DECODE_ERROR' }));
    }).not.to.throw();
    client.disconnect();
  });

  it('a certificate the client does not trust: StoreUnavailableError at once, not after commandTimeoutMs, saying why', async () => {
    const client = new Redis({ host: '127.0.0.1', port: tlsPort, tls: { servername: 'localhost' } });
    const throttle = new Throttle({ name: 'acme', rules: ['4/s'], store: redisStore(client, { prefix: uniquePrefix() }) });
    const startedAt = performance.now();
    const error = await throttle.schedule('u', () => 'ran').catch((reason: unknown) => reason);
    expect(performance.now() - startedAt).to.be.below(1_000);
    await throttle.close();
    // It never connects: disconnect() (quit() would wait for a connection).
    client.disconnect();
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect((error as Error).message).to.match(/cannot be reached.*(self[- ]signed|unable to (get|verify))/i);
    expect(String((error as Error).cause)).to.match(/self[- ]signed|unable to (get|verify)/i);
  });

  for (const mode of ['wait', 'throw'] as ThrottleMode[]) {
    it(`${mode} mode: books, waits and refuses over TLS as in the clear`, async () => {
      const client = tlsClient();
      await client.connect();
      const store = redisStore(client, { prefix: uniquePrefix() });
      const throttle = new Throttle({ name: 'acme', rules: ['3/200ms'], mode, store });
      try {
        const startedAt = performance.now();
        const starts: number[] = [];
        const outcomes = await Promise.allSettled(Array.from({ length: 6 }, () => throttle.schedule('u', () => starts.push(performance.now() - startedAt))));
        if (mode === 'throw') {
          expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).to.have.length(3);
          const refused = outcomes.find((outcome) => outcome.status === 'rejected') as PromiseRejectedResult;
          expect(refused.reason).to.be.instanceOf(RateLimitedError);
        } else {
          expect(outcomes.every((outcome) => outcome.status === 'fulfilled')).to.equal(true);
          // The second three wait for the first three to leave the 200 ms window.
          const sorted = starts.sort((a, b) => a - b);
          expect(sorted[3]! - sorted[0]!).to.be.at.least(200);
        }
        const inspectedAt = performance.now() - startedAt;
        const { used } = (await throttle.inspect('u')).rules[0]!;
        if (mode === 'throw') expect(used).to.equal(3);
        else {
          // v2 starts each of the second three one window after the completion it waits for, not all
          // at once: every call that started within the last window (less 10 ms for the conversion
          // between the local clock and Redis') still counts, and never more than the limit.
          const recent = starts.filter((start) => start > inspectedAt - 200 + 10).length;
          expect(used, `used at ${Math.round(inspectedAt)} ms, starts ${starts.map(Math.round).join(', ')}`).to.be.within(Math.max(1, recent), 3);
        }
      } finally {
        await throttle.close();
      }
    });
  }

  it('finds a data loss by its heartbeat and puts the calls back, over TLS', async () => {
    const client = tlsClient();
    await client.connect();
    const store = redisStore(client, { prefix: uniquePrefix(), recovery: { heartbeatMs: 100, graceMs: 400 } });
    const throttle = new Throttle({ name: 'acme', rules: ['3/5s'], store, maxDelayMs: 0 });
    try {
      for (let i = 0; i < 3; i++) await throttle.schedule('u', () => i);
      await client.flushall();
      await new Promise((resolve) => setTimeout(resolve, 250));
      expect(store.recoveries).to.equal(1);
      expect((await throttle.inspect('u')).rules[0]!.used).to.equal(3);
    } finally {
      await throttle.close();
    }
  });
});

/**
 * ioredis listens to its socket's first 'error' only (`once`), but a TLS socket whose handshake
 * `disconnect()` cut short can report two: its failed certificate check, then the server's alert.
 * Sockets that fail, and the store's subscriber's as the store ends it, are listened to until they
 * close: here with sockets that report the second error on demand.
 */
describe('RedisStore: a second error of a socket ioredis no longer listens to', () => {
  /** An ioredis connection as the store sees it, its socket forwarding its first error only, as ioredis does. */
  class Connection extends EventEmitter {
    status = 'ready';
    stream = new EventEmitter();
    readonly duplicates: Connection[] = [];

    constructor() {
      super();
      this.stream.once('error', (error) => this.emit('error', error));
    }

    defineCommand(): void {}

    duplicate(): Connection {
      const duplicate = new Connection();
      this.duplicates.push(duplicate);
      return duplicate;
    }

    subscribe(): Promise<number> {
      return Promise.resolve(1);
    }

    disconnect(): void {
      this.status = 'end';
    }
  }

  /** The socket's two errors: the first reaches the connection's 'error' event, the second nothing of ioredis'. */
  function failTwice(connection: Connection): void {
    connection.stream.emit('error', new Error('self-signed certificate in certificate chain'));
    connection.stream.emit('error', new Error('ssl3_read_bytes:tlsv1 alert decode error: SSL alert number 50'));
  }

  it("the client's socket that failed: its second error is heard", async () => {
    const client = new Connection();
    const store = new RedisStore(client);
    expect(() => failTwice(client)).not.to.throw();
    await store.close();
  });

  for (const how of ['store.close()', "the client's end"] as const) {
    it(`the subscriber's socket, ended by ${how} mid-handshake: its second error is heard`, async () => {
      const client = new Connection();
      const store = new RedisStore(client);
      await store.listen('acme', () => undefined);
      const [subscriber] = client.duplicates;
      if (how === 'store.close()') await store.close();
      else {
        client.status = 'end';
        client.emit('end');
      }
      expect(subscriber!.status).to.equal('end');
      expect(() => failTwice(subscriber!)).not.to.throw();
      await store.close();
    });
  }
});
