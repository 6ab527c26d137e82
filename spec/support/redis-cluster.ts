/**
 * A real Redis Cluster for specs and benchmarks: N masters, no replicas, each a `redis-server
 * --cluster-enabled yes` this process starts on free ports of 127.0.0.1 (client port and cluster bus
 * port both chosen free, so no port + 10000 clash). Three masters or more are joined with
 * `redis-cli --cluster create`; one or two (which redis-cli refuses) get their slot ranges with
 * `CLUSTER ADDSLOTSRANGE` and meet with `CLUSTER MEET`. Never touches a server it did not start.
 *
 *     const cluster = await startRedisCluster({ masters: 3 });
 *     const client = cluster.client();              // an ioredis Cluster, disconnected by stop()
 *     await cluster.migrateSlotOf('vt:acme:{42}:log'); // MIGRATING/IMPORTING, MIGRATE in batches, SETSLOT NODE
 *     await cluster.stop();                         // kills every server by pid, removes its directory
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Cluster, Redis, type ClusterOptions } from 'ioredis';
import { freePort, startRedis, type RedisServer } from '../../scripts/support/redis-server.js';

const run = promisify(execFile);
const SLOTS = 16_384;

/** One master of the cluster. */
export interface ClusterNode {
  readonly host: string;
  readonly port: number;
  readonly pid: number;
  /** The node's cluster id (`CLUSTER MYID`). */
  readonly id: string;
}

/** What `migrateSlotOf` did, and the redirections the two nodes answered meanwhile. */
export interface SlotMigration {
  readonly slot: number;
  readonly from: ClusterNode;
  readonly to: ClusterNode;
  /** Keys moved with MIGRATE. */
  readonly keys: number;
  readonly batches: number;
  /** From the first SETSLOT to the last, ms. */
  readonly durationMs: number;
}

/** Error replies by kind (`ASK`, `MOVED`, `TRYAGAIN`, …), summed over the masters: `INFO errorstats`. */
export type ErrorStats = Record<string, number>;

export interface MigrateOptions {
  /** Where the slot goes. @default the next master after its owner */
  readonly to?: ClusterNode;
  /** Keys per MIGRATE. @default 2 */
  readonly batch?: number;
  /** Pause after each MIGRATE, so that traffic meets the half-moved slot. @default 20 */
  readonly pauseMs?: number;
  /** Keys of the slot to move in the first batch (clients then meet ASK for them while the rest moves). */
  readonly first?: readonly string[];
  /** Called after each MIGRATE with the keys moved so far, while the slot is half-moved. */
  readonly onBatch?: (moved: number) => void;
}

export interface RedisCluster {
  readonly masters: readonly ClusterNode[];
  /** Seed addresses for `new Cluster(...)`. */
  readonly startupNodes: ReadonlyArray<{ host: string; port: number }>;
  /** A new ioredis Cluster client of this cluster; `stop()` disconnects it. */
  client(options?: ClusterOptions): Cluster;
  /** An admin connection to one master (created once per node, closed by `stop()`). */
  admin(node: ClusterNode): Redis;
  /** The master that serves `key`'s slot now. */
  ownerOf(key: string): Promise<ClusterNode>;
  /** `INFO errorstats` summed over the masters (counts since each server started). */
  errorStats(): Promise<ErrorStats>;
  /**
   * Moves the hash slot of `key` to another master the way a resharding does, while clients keep
   * running: `SETSLOT IMPORTING` on the target, `SETSLOT MIGRATING` on the owner, `MIGRATE` of the
   * slot's keys in batches, then `SETSLOT NODE` on the target, the owner and every other master.
   * Clients meet ASK for keys already moved, TRYAGAIN for a multi-key command whose keys are split,
   * and MOVED once the slot has its new owner.
   */
  migrateSlotOf(key: string, options?: MigrateOptions): Promise<SlotMigration>;
  /** Disconnects every client it made, kills every server by pid, removes their directories. */
  stop(): Promise<void>;
}

/**
 * Starts a cluster of `masters` masters and waits until every node reports `cluster_state:ok` and
 * knows the whole slot map. On failure, stops whatever it started.
 */
export async function startRedisCluster(options: { masters?: number } = {}): Promise<RedisCluster> {
  const count = options.masters ?? 3;
  if (!Number.isInteger(count) || count < 1) throw new TypeError(`Expected masters to be a whole number ≥ 1, got ${count}`);
  const servers: RedisServer[] = [];
  const admins = new Map<number, Redis>();
  const clients: Cluster[] = [];
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopped ??= (async () => {
      for (const client of clients) client.disconnect();
      for (const admin of admins.values()) admin.disconnect();
      await Promise.all(servers.map((server) => server.stop()));
    })();
    return stopped;
  };
  const adminOf = (port: number): Redis => {
    let admin = admins.get(port);
    if (!admin) {
      admin = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, lazyConnect: false });
      admin.on('error', () => {});
      admins.set(port, admin);
    }
    return admin;
  };
  try {
    const busPorts = new Map<number, number>();
    const started = await Promise.allSettled(Array.from({ length: count }, startClusterNode));
    for (const result of started) {
      if (result.status === 'fulfilled') {
        servers.push(result.value.server);
        busPorts.set(result.value.server.port, result.value.busPort);
      }
    }
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    const masters: ClusterNode[] = [];
    for (const server of servers) {
      const id = (await adminOf(server.port).call('CLUSTER', 'MYID')) as string;
      masters.push({ host: '127.0.0.1', port: server.port, pid: server.pid, id });
    }
    if (count >= 3) {
      const addresses = masters.map((node) => `${node.host}:${node.port}`);
      await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], { timeout: 30_000 });
    } else {
      for (let i = 0; i < count; i++) {
        const low = Math.floor((i * SLOTS) / count);
        const high = Math.floor(((i + 1) * SLOTS) / count) - 1;
        await adminOf(masters[i]!.port).call('CLUSTER', 'ADDSLOTSRANGE', low, high);
      }
      for (const node of masters.slice(1)) {
        await adminOf(masters[0]!.port).call('CLUSTER', 'MEET', node.host, node.port, busPorts.get(node.port)!);
      }
    }
    await waitUntilReady(masters.map((node) => adminOf(node.port)), count);

    const byId = new Map(masters.map((node) => [node.id, node]));
    const ownerOfSlot = async (slot: number): Promise<ClusterNode> => {
      const shards = (await adminOf(masters[0]!.port).call('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number, string]]>;
      const shard = shards.find(([low, high]) => slot >= low && slot <= high);
      const owner = shard && byId.get(shard[2][2]);
      if (!owner) throw new Error(`no master serves slot ${slot}`);
      return owner;
    };
    const slotOf = async (key: string): Promise<number> => (await adminOf(masters[0]!.port).call('CLUSTER', 'KEYSLOT', key)) as number;

    return {
      masters,
      startupNodes: masters.map(({ host, port }) => ({ host, port })),
      client(clientOptions = {}) {
        const client = new Cluster(
          masters.map(({ host, port }) => ({ host, port })),
          clientOptions,
        );
        clients.push(client);
        return client;
      },
      admin: (node) => adminOf(node.port),
      ownerOf: async (key) => ownerOfSlot(await slotOf(key)),
      async errorStats() {
        const total: ErrorStats = {};
        for (const node of masters) {
          const text = (await adminOf(node.port).call('INFO', 'errorstats')) as string;
          for (const [, kind, calls] of text.matchAll(/^errorstat_(\S+?):count=(\d+)/gm)) {
            total[kind!] = (total[kind!] ?? 0) + Number(calls);
          }
        }
        return total;
      },
      async migrateSlotOf(key, migrate = {}) {
        if (masters.length < 2) throw new Error('a slot migration needs at least 2 masters');
        const slot = await slotOf(key);
        const from = await ownerOfSlot(slot);
        const to = migrate.to ?? masters[(masters.indexOf(from) + 1) % masters.length]!;
        if (to.id === from.id) throw new Error(`slot ${slot} is already on ${to.port}`);
        const batch = migrate.batch ?? 2;
        const pauseMs = migrate.pauseMs ?? 20;
        const source = adminOf(from.port);
        const target = adminOf(to.port);
        const startedAt = performance.now();
        await target.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', from.id);
        await source.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', to.id);
        let keys = 0;
        let batches = 0;
        const move = async (names: readonly string[]): Promise<void> => {
          if (names.length === 0) return;
          // REPLACE: a key the target already holds can only be an older copy of this same slot's key.
          await source.call('MIGRATE', to.host, to.port, '', 0, 5_000, 'REPLACE', 'KEYS', ...names);
          keys += names.length;
          batches += 1;
          migrate.onBatch?.(keys);
          await new Promise((resolve) => setTimeout(resolve, pauseMs));
        };
        const present = async (names: readonly string[]): Promise<string[]> => {
          const found: string[] = [];
          for (const name of names) if ((await source.exists(name)) === 1) found.push(name);
          return found;
        };
        await move(await present(migrate.first ?? []));
        while (true) {
          const names = (await source.call('CLUSTER', 'GETKEYSINSLOT', slot, batch)) as string[];
          if (names.length === 0) break;
          await move(names);
        }
        // The order redis-cli uses: the target first, so it owns the slot before the owner lets go.
        await target.call('CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
        await source.call('CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
        for (const node of masters) {
          if (node !== from && node !== to) await adminOf(node.port).call('CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
        }
        return { slot, from, to, keys, batches, durationMs: performance.now() - startedAt };
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** One cluster-enabled redis-server; its client and bus ports both free (retried if the bus port was taken meanwhile). */
async function startClusterNode(): Promise<{ server: RedisServer; busPort: number }> {
  for (let attempt = 0; ; attempt++) {
    const busPort = await freePort();
    try {
      // startRedis runs it in its own temporary directory (--dir), where the node writes nodes.conf.
      const server = await startRedis({
        args: [
          ...['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-port', String(busPort)],
          // A lone node learns its own address only from a peer: announce it, so CLUSTER SLOTS names it.
          ...['--cluster-announce-ip', '127.0.0.1', '--daemonize', 'no'],
        ],
      });
      return { server, busPort };
    } catch (error) {
      if (attempt >= 2) throw error;
    }
  }
}

/** Waits until every node says `cluster_state:ok`, knows `count` nodes and sees all 16384 slots assigned. */
async function waitUntilReady(admins: readonly Redis[], count: number): Promise<void> {
  const deadline = Date.now() + 20_000;
  let last = '';
  while (Date.now() < deadline) {
    const infos = await Promise.all(admins.map((admin) => admin.call('CLUSTER', 'INFO') as Promise<string>));
    const ready = infos.every(
      (info) =>
        /^cluster_state:ok\r?$/m.test(info) &&
        new RegExp(`^cluster_known_nodes:${count}\\r?$`, 'm').test(info) &&
        new RegExp(`^cluster_slots_ok:${SLOTS}\\r?$`, 'm').test(info),
    );
    if (ready) return;
    last = infos.join('\n');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`the cluster did not reach cluster_state:ok within 20 s:\n${last}`);
}
