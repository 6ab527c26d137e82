/**
 * Faults for a Redis Cluster with replicas (`startRedisCluster({ masters: 3, replicas: 1 })`), so that
 * a spec sees what a failover does to the store's keys: a master killed for good, a master emptied, and
 * a replica that misses writes and is then promoted anyway, the way an asynchronous replica can be.
 *
 *     const { promoted, durationMs } = await killMaster(cluster, cluster.masters[0]!); // SIGKILL, wait for its replica
 *     const replica = await lagReplica(cluster, master);   // replica cut off: later writes to master miss it
 *     await failoverForce(cluster, replica);               // promoted without them; the old master follows it
 *
 * Every wait has a 20 s deadline and throws with the last state it saw. Never touches a server the
 * cluster did not start.
 */
import type { Redis } from 'ioredis';
import { REPLICATION_USER, waitFor, type ClusterNode, type RedisCluster } from './redis-cluster.js';

/** What a failover did. */
export interface Failover {
  /** The replica that now serves the slots. */
  readonly promoted: ClusterNode;
  /** The master it took them from (dead after `killMaster`, its replica after `failoverForce`). */
  readonly from: ClusterNode;
  /** From the SIGKILL or the `CLUSTER FAILOVER` to every live node seeing the promoted node serve the slots, ms. */
  readonly durationMs: number;
}

type Shards = Array<[number, number, [string, number, string]]>;

const info = async (admin: Redis, section: string): Promise<string> => (await admin.call('INFO', section)) as string;
const field = (text: string, name: string): string | undefined => new RegExp(`^${name}:(.*?)\\r?$`, 'm').exec(text)?.[1];

/**
 * SIGKILLs `master` by pid (it stays dead) and waits until its replica has taken over: every live node
 * sees the replica serve the dead master's slots and says `cluster_state:ok`. Takes the node timeout
 * (failure detection) and then the election's own delay of 500 ms plus up to 500 ms at random: 1.6 to
 * 2 s with `nodeTimeoutMs: 500`.
 */
export async function killMaster(cluster: RedisCluster, master: ClusterNode): Promise<Failover> {
  const replica = await replicaToPromote(cluster, master);
  const ranges = await slotRangesOf(cluster, master);
  const startedAt = performance.now();
  process.kill(master.pid, 'SIGKILL');
  await waitFor(`master ${master.port} (pid ${master.pid}) did not exit after SIGKILL`, async () => ({
    ok: !cluster.isAlive(master),
    state: `pid ${master.pid} still runs`,
  }));
  await waitUntilServing(cluster, replica, ranges, `replica ${replica.port} did not take over from killed master ${master.port}`);
  const durationMs = performance.now() - startedAt;
  await cluster.currentMasters();
  return { promoted: replica, from: master, durationMs };
}

/**
 * `FLUSHALL` on `master`; its replica, if its link is up, follows. Returns how many replicas had
 * applied the flush (`WAIT`, 5 s at most) — 0 for a replica cut off by `lagReplica`.
 */
export async function flushMaster(cluster: RedisCluster, master: ClusterNode): Promise<number> {
  const admin = cluster.admin(master);
  await admin.call('FLUSHALL', 'SYNC');
  const linked = Number(field(await info(admin, 'replication'), 'connected_slaves') ?? 0);
  return linked === 0 ? 0 : ((await admin.call('WAIT', linked, 5_000)) as number);
}

/**
 * Cuts `master`'s replica off, so that it misses every write to the master from now on while staying
 * its replica in the cluster's eyes (the cluster bus is untouched, so no failover starts): turns the
 * replication user off on the master (`ACL SETUSER repl off`), then drops the replica's link (`CLIENT
 * KILL TYPE replica`). The replica retries every second and fails its AUTH. Waits until the replica
 * says `master_link_status:down` and the master `connected_slaves:0`. Returns the replica.
 */
export async function lagReplica(cluster: RedisCluster, master: ClusterNode): Promise<ClusterNode> {
  const replica = await replicaToPromote(cluster, master);
  const admin = cluster.admin(master);
  await admin.call('ACL', 'SETUSER', REPLICATION_USER, 'off');
  await admin.call('CLIENT', 'KILL', 'TYPE', 'replica');
  await waitFor(`replica ${replica.port} still follows master ${master.port}`, async () => {
    const [mine, theirs] = await Promise.all([info(cluster.admin(replica), 'replication'), info(admin, 'replication')]);
    const ok = field(mine, 'master_link_status') === 'down' && field(theirs, 'connected_slaves') === '0';
    return { ok, state: `replica ${replica.port}:\n${mine}\nmaster ${master.port}:\n${theirs}` };
  });
  return replica;
}

/**
 * Undoes `lagReplica` without a failover: turns the replication user back on on `master` and waits until
 * its replica has caught up with what it missed (link up, and the master has its ACK for every write).
 */
export async function resumeReplica(cluster: RedisCluster, master: ClusterNode): Promise<ClusterNode> {
  const replica = await replicaToPromote(cluster, master);
  const admin = cluster.admin(master);
  await admin.call('ACL', 'SETUSER', REPLICATION_USER, 'on');
  await waitUntilFollowing(cluster, replica, master);
  return replica;
}

/**
 * `CLUSTER FAILOVER FORCE` on `replica`: it takes its master's slots at once, without syncing with it
 * first, so whatever it missed (see `lagReplica`) is gone. Waits until every live node sees it serve
 * the slots and says `cluster_state:ok`; then turns the replication user back on on every live node
 * and waits until the old master follows the new one (a full sync, which drops the writes only the old
 * master had).
 */
export async function failoverForce(cluster: RedisCluster, replica: ClusterNode): Promise<Failover> {
  await cluster.currentMasters();
  const from = cluster.masterOf(replica);
  if (!from) throw new Error(`node ${replica.port} is not a replica`);
  const ranges = await slotRangesOf(cluster, from);
  const startedAt = performance.now();
  await cluster.admin(replica).call('CLUSTER', 'FAILOVER', 'FORCE');
  await waitUntilServing(cluster, replica, ranges, `replica ${replica.port} did not take over from master ${from.port}`);
  const durationMs = performance.now() - startedAt;
  for (const node of cluster.nodes.filter(cluster.isAlive)) {
    await cluster.admin(node).call('ACL', 'SETUSER', REPLICATION_USER, 'on');
  }
  if (cluster.isAlive(from)) await waitUntilFollowing(cluster, from, replica);
  await cluster.currentMasters();
  return { promoted: replica, from, durationMs };
}

/** `master`'s replica, re-reading roles first; throws if it has none. */
async function replicaToPromote(cluster: RedisCluster, master: ClusterNode): Promise<ClusterNode> {
  await cluster.currentMasters();
  const replica = cluster.replicaOf(master);
  if (!replica) throw new Error(`master ${master.port} has no live replica`);
  return replica;
}

/** The slot ranges `node` serves, as a live node sees them (`CLUSTER SLOTS`). */
async function slotRangesOf(cluster: RedisCluster, node: ClusterNode): Promise<Array<[number, number]>> {
  const seer = cluster.nodes.find((other) => other !== node && cluster.isAlive(other)) ?? node;
  const shards = (await cluster.admin(seer).call('CLUSTER', 'SLOTS')) as Shards;
  const ranges = shards.filter(([, , owner]) => owner[2] === node.id).map(([low, high]): [number, number] => [low, high]);
  if (ranges.length === 0) throw new Error(`node ${node.port} serves no slot`);
  return ranges;
}

/** Waits until every live node says `cluster_state:ok` and sees `node` serve all of `ranges`. */
async function waitUntilServing(cluster: RedisCluster, node: ClusterNode, ranges: ReadonlyArray<[number, number]>, what: string): Promise<void> {
  await waitFor(what, async () => {
    const seen = await Promise.all(
      cluster.nodes.filter(cluster.isAlive).map(async (other) => {
        const admin = cluster.admin(other);
        const state = field((await admin.call('CLUSTER', 'INFO')) as string, 'cluster_state');
        const shards = (await admin.call('CLUSTER', 'SLOTS')) as Shards;
        const serves = ranges.every(([low, high]) => shards.some(([from, to, owner]) => owner[2] === node.id && from <= low && to >= high));
        const map = shards.map(([from, to, owner]) => `${from}-${to}@${owner[1]}`).join(' ');
        return { ok: state === 'ok' && serves, state: `${other.port}: cluster_state:${state}, slots ${map}` };
      }),
    );
    return { ok: seen.every((one) => one.ok), state: seen.map((one) => one.state).join('\n') };
  });
}

/**
 * Waits until `replica` follows `master` with its link up, and `master` has its ACK for every write the
 * master had when the wait began (until a replica's first ACK after a full sync, the master holds its
 * writes back from it).
 */
async function waitUntilFollowing(cluster: RedisCluster, replica: ClusterNode, master: ClusterNode): Promise<void> {
  const target = Number(field(await info(cluster.admin(master), 'replication'), 'master_repl_offset'));
  await waitFor(`node ${replica.port} did not catch up with master ${master.port} (offset ${target})`, async () => {
    const [mine, theirs] = await Promise.all([info(cluster.admin(replica), 'replication'), info(cluster.admin(master), 'replication')]);
    // slave0:ip=127.0.0.1,port=6380,state=online,offset=1234,lag=0
    const seen = new RegExp(`^slave\\d+:ip=[^,]*,port=${replica.port},state=online,offset=(\\d+)`, 'm').exec(theirs);
    const ok = field(mine, 'master_port') === String(master.port) && field(mine, 'master_link_status') === 'up' && seen !== null && Number(seen[1]) >= target;
    return { ok, state: `node ${replica.port}:\n${mine}\nmaster ${master.port}:\n${theirs}` };
  });
}
