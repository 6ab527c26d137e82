/**
 * A real Redis Cluster for specs and benchmarks: N masters, no replicas unless asked, each a
 * `redis-server --cluster-enabled yes` this process starts on free ports of 127.0.0.1 (client port and
 * cluster bus port both chosen free, so no port + 10000 clash). Three masters or more are joined with
 * `redis-cli --cluster create`; one or two (which redis-cli refuses) get their slot ranges with
 * `CLUSTER ADDSLOTSRANGE` and meet with `CLUSTER MEET`. Never touches a server it did not start.
 *
 *     const cluster = await startRedisCluster({ masters: 3 });
 *     const client = cluster.client();              // an ioredis Cluster, disconnected by stop()
 *     await cluster.migrateSlotOf('vt:acme:{42}:log'); // MIGRATING/IMPORTING, MIGRATE in batches, SETSLOT NODE
 *     await cluster.stop();                         // kills every server by pid, removes its directory
 *
 * With `replicas: 1` every master gets a replica (`--cluster-replicas 1`), so that a spec can fail a
 * master over and see what the store loses; the faults themselves are in redis-cluster-faults.ts:
 *
 *     const ha = await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 500 });
 *     ha.replicaOf(ha.masters[0]!);                 // the node that takes over if that master dies
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { Cluster, Redis, type ClusterOptions } from 'ioredis';
import { freePort, startRedis, type RedisServer } from '../../scripts/support/redis-server.js';

const run = promisify(execFile);
const SLOTS = 16_384;

/**
 * The ACL user replicas authenticate as (`--masteruser`). Every node of a cluster with replicas has
 * it, so that turning it off on a master cuts that master's replica off (redis-cluster-faults.ts); the
 * default user stays open (nopass) for clients.
 */
export const REPLICATION_USER = 'repl';

export interface StartClusterOptions {
  /** @default 3 */
  readonly masters?: number;
  /** Replicas per master, 0 or 1; 1 needs at least 3 masters (redis-cli sets the replicas up). @default 0 */
  readonly replicas?: number;
  /**
   * `--cluster-node-timeout` of every node, ms: how long a master may be unreachable before its
   * replica starts a failover. @default redis's own (15 000)
   */
  readonly nodeTimeoutMs?: number;
}

/** One node of the cluster, master or replica (roles change on a failover; the node stays). */
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
  /** Every node this cluster started, masters then replicas, dead or alive, in start order. */
  readonly nodes: readonly ClusterNode[];
  /** The live masters as of the last role read (at start, by `currentMasters()` or a fault helper). */
  readonly masters: readonly ClusterNode[];
  /** The live replicas as of the last role read. */
  readonly replicas: readonly ClusterNode[];
  /** Seed addresses for `new Cluster(...)`: every node as started. */
  readonly startupNodes: ReadonlyArray<{ host: string; port: number }>;
  /** The replica that follows `master`, as of the last role read; undefined if it has none. */
  replicaOf(master: ClusterNode): ClusterNode | undefined;
  /** The master `replica` follows, as of the last role read; undefined for a master. */
  masterOf(replica: ClusterNode): ClusterNode | undefined;
  /** Re-reads the role of every live node (`ROLE`) and returns the masters: a failover changes them. */
  currentMasters(): Promise<ClusterNode[]>;
  /** Whether the node's process still runs (a fault helper may have killed it). */
  isAlive(node: ClusterNode): boolean;
  /** A new ioredis Cluster client of this cluster, seeded with the live nodes; `stop()` disconnects it. */
  client(options?: ClusterOptions): Cluster;
  /** An admin connection to one node (created once per node, closed by `stop()`). */
  admin(node: ClusterNode): Redis;
  /** The master that serves `key`'s slot now, as a live node sees it (`CLUSTER SLOTS`). */
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
 * Starts a cluster of `masters` masters (and `replicas` replicas of each) and waits until every node
 * reports `cluster_state:ok` and knows the whole slot map, and every replica has synced with its
 * master. On failure, stops whatever it started.
 */
export async function startRedisCluster(options: StartClusterOptions = {}): Promise<RedisCluster> {
  const count = options.masters ?? 3;
  if (!Number.isInteger(count) || count < 1) throw new TypeError(`Expected masters to be a whole number ≥ 1, got ${count}`);
  const perMaster = options.replicas ?? 0;
  if (perMaster !== 0 && perMaster !== 1) throw new TypeError(`Expected replicas to be 0 or 1, got ${perMaster}`);
  if (perMaster > 0 && count < 3) throw new TypeError(`Replicas need at least 3 masters (redis-cli sets them up), got ${count}`);
  const timeout = options.nodeTimeoutMs;
  if (timeout !== undefined && (!Number.isInteger(timeout) || timeout < 1)) {
    throw new TypeError(`Expected nodeTimeoutMs to be a whole number of ms ≥ 1, got ${timeout}`);
  }
  const password = randomBytes(12).toString('hex');
  const nodeArgs = [
    ...(timeout === undefined ? [] : ['--cluster-node-timeout', String(timeout)]),
    ...(perMaster === 0
      ? []
      : [
          // Any replica may be promoted, however long it has been cut off from its master (lagReplica).
          ...['--cluster-replica-validity-factor', '0'],
          // Replicas log in as their own user, which a spec can turn off. One word per argument:
          // redis-server quotes an argument holding spaces, and then reads it as one user name.
          ...['--user', REPLICATION_USER, 'on', `>${password}`, '+psync', '+replconf', '+ping'],
          ...['--masteruser', REPLICATION_USER, '--masterauth', password],
          // A full sync starts at once, not after the default 5 s wait for more replicas to join it.
          ...['--repl-diskless-sync-delay', '0'],
        ]),
  ];
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
    const started = await Promise.allSettled(Array.from({ length: count * (1 + perMaster) }, () => startClusterNode(nodeArgs)));
    for (const result of started) {
      if (result.status === 'fulfilled') {
        servers.push(result.value.server);
        busPorts.set(result.value.server.port, result.value.busPort);
      }
    }
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    const nodes: ClusterNode[] = [];
    for (const server of servers) {
      const id = (await adminOf(server.port).call('CLUSTER', 'MYID')) as string;
      nodes.push({ host: '127.0.0.1', port: server.port, pid: server.pid, id });
    }
    const masters = nodes.slice(0, count);
    if (count >= 3) {
      // redis-cli makes masters of the first `count` addresses, and replicas of the others.
      const addresses = nodes.map((node) => `${node.host}:${node.port}`);
      await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', String(perMaster), '--cluster-yes'], { timeout: 30_000 });
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
    await waitUntilReady(
      nodes.map((node) => adminOf(node.port)),
      count,
    );

    // SIGKILL leaves the pid to be reaped by this process: once reaped, signal 0 finds no such process.
    const isAlive = (node: ClusterNode): boolean => {
      try {
        process.kill(node.pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    const anyLive = (): Redis => {
      const node = nodes.find(isAlive);
      if (!node) throw new Error('no node of the cluster is alive');
      return adminOf(node.port);
    };
    const roles = { masters, replicas: nodes.slice(count), masterOf: new Map<string, ClusterNode>() };
    const currentMasters = async (): Promise<ClusterNode[]> => {
      const read = { masters: [] as ClusterNode[], replicas: [] as ClusterNode[], masterOf: new Map<string, ClusterNode>() };
      for (const node of nodes.filter(isAlive)) {
        // ['master', offset, replicas] or ['slave', host, port, state, offset]
        const role = (await adminOf(node.port).call('ROLE')) as [string, string, number];
        if (role[0] === 'master') {
          read.masters.push(node);
          continue;
        }
        read.replicas.push(node);
        const master = nodes.find((other) => other.port === Number(role[2]));
        if (master) read.masterOf.set(node.id, master);
      }
      Object.assign(roles, read);
      return read.masters;
    };
    if (perMaster > 0) await currentMasters();

    const byId = new Map(nodes.map((node) => [node.id, node]));
    const ownerOfSlot = async (slot: number): Promise<ClusterNode> => {
      const shards = (await anyLive().call('CLUSTER', 'SLOTS')) as Array<[number, number, [string, number, string]]>;
      const shard = shards.find(([low, high]) => slot >= low && slot <= high);
      const owner = shard && byId.get(shard[2][2]);
      if (!owner) throw new Error(`no master serves slot ${slot}`);
      return owner;
    };
    const slotOf = async (key: string): Promise<number> => (await anyLive().call('CLUSTER', 'KEYSLOT', key)) as number;

    return {
      nodes,
      get masters() {
        return roles.masters;
      },
      get replicas() {
        return roles.replicas;
      },
      startupNodes: nodes.map(({ host, port }) => ({ host, port })),
      replicaOf: (master) => roles.replicas.find((replica) => roles.masterOf.get(replica.id)?.id === master.id),
      masterOf: (replica) => roles.masterOf.get(replica.id),
      currentMasters,
      isAlive,
      client(clientOptions = {}) {
        const client = new Cluster(
          nodes.filter(isAlive).map(({ host, port }) => ({ host, port })),
          clientOptions,
        );
        clients.push(client);
        return client;
      },
      admin: (node) => adminOf(node.port),
      ownerOf: async (key) => ownerOfSlot(await slotOf(key)),
      async errorStats() {
        const total: ErrorStats = {};
        for (const node of roles.masters) {
          const text = (await adminOf(node.port).call('INFO', 'errorstats')) as string;
          for (const [, kind, calls] of text.matchAll(/^errorstat_(\S+?):count=(\d+)/gm)) {
            total[kind!] = (total[kind!] ?? 0) + Number(calls);
          }
        }
        return total;
      },
      async migrateSlotOf(key, migrate = {}) {
        const masters = roles.masters;
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
async function startClusterNode(extraArgs: readonly string[]): Promise<{ server: RedisServer; busPort: number }> {
  for (let attempt = 0; ; attempt++) {
    const busPort = await freePort();
    try {
      // startRedis runs it in its own temporary directory (--dir), where the node writes nodes.conf.
      const server = await startRedis({
        args: [
          ...['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-port', String(busPort)],
          // A lone node learns its own address only from a peer: announce it, so CLUSTER SLOTS names it.
          ...['--cluster-announce-ip', '127.0.0.1', '--daemonize', 'no'],
          ...extraArgs,
        ],
      });
      return { server, busPort };
    } catch (error) {
      if (attempt >= 2) throw error;
    }
  }
}

/**
 * Waits until every node says `cluster_state:ok`, knows all the nodes and sees all 16384 slots
 * assigned; with replicas, also until `masters` nodes are masters and each of the others a replica
 * whose link to its master is up (`master_link_status:up`: its first sync is done), and then until
 * each master's writes reach its replica: after a sync a master holds writes back until the replica's
 * first ACK, up to 1 s later, and a replica cut off meanwhile (lagReplica) would miss them too.
 */
async function waitUntilReady(admins: readonly Redis[], masters: number): Promise<void> {
  const count = admins.length;
  await waitFor('the cluster did not reach cluster_state:ok', async () => {
    const infos = await Promise.all(admins.map((admin) => admin.call('CLUSTER', 'INFO') as Promise<string>));
    const ok = infos.every(
      (info) =>
        /^cluster_state:ok\r?$/m.test(info) &&
        new RegExp(`^cluster_known_nodes:${count}\\r?$`, 'm').test(info) &&
        new RegExp(`^cluster_slots_ok:${SLOTS}\\r?$`, 'm').test(info),
    );
    if (!ok || count === masters) return { ok, state: infos.join('\n') };
    const replication = await Promise.all(admins.map((admin) => admin.call('INFO', 'replication') as Promise<string>));
    const replicas = replication.filter((info) => /^role:slave\r?$/m.test(info));
    const synced = replicas.length === count - masters && replicas.every((info) => /^master_link_status:up\r?$/m.test(info));
    return { ok: synced, state: replication.join('\n') };
  });
  if (count === masters) return;
  // FLUSHALL is replicated even on an empty database: WAIT on the connection that sent it shows it arrived.
  await Promise.all(
    admins.map(async (admin) => {
      if (!/^role:master\r?$/m.test((await admin.call('INFO', 'replication')) as string)) return;
      await admin.call('FLUSHALL');
      if (((await admin.call('WAIT', 1, 20_000)) as number) < 1) throw new Error(`no replica of ${admin.options.port} acknowledged a write within 20 s`);
    }),
  );
}

/**
 * Polls `probe` every 50 ms until it says `ok`; after `timeoutMs` throws `what`, with the last state it
 * saw. A probe that throws counts as not ok (a node may be half-way through a failover).
 */
export async function waitFor(what: string, probe: () => Promise<{ ok: boolean; state: string }>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: string;
  while (true) {
    try {
      const seen = await probe();
      if (seen.ok) return;
      last = seen.state;
    } catch (error) {
      last = `the probe failed: ${(error as Error).message}`;
    }
    if (Date.now() >= deadline) throw new Error(`${what} within ${timeoutMs / 1000} s; last seen:\n${last}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
