/**
 * A Redis Cluster with one replica per master (3 + 3, `cluster-node-timeout` 500 ms) loses one
 * shard's data while 4 processes send 9 users' calls at twice the limit (scripts/bench/cluster-faults.ts):
 * a master killed (its replica promoted), a master emptied with FLUSHALL, and a replica cut off from
 * its master and then promoted with CLUSTER FAILOVER FORCE, so that the shard rolls back. The
 * simulated vendor must see no window over the limit, and every call must run exactly once.
 */
import { expect } from 'chai';
import { runClusterFault, type ClusterFault, type FaultRunResult } from '../scripts/bench/cluster-faults.js';
import { startRedisCluster, type RedisCluster } from './support/redis-cluster.js';

describe('a Redis Cluster shard that fails over or loses its data (3 masters, 1 replica each)', function () {
  this.timeout(60_000);
  let cluster: RedisCluster | undefined;

  beforeEach(async () => {
    cluster = await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 500 });
  });

  afterEach(async () => {
    await cluster?.stop();
    cluster = undefined;
  });

  async function run(fault: ClusterFault, recovery = true): Promise<FaultRunResult> {
    // maxHoldMs well above a call's time under the whole suite's load: the vendor runs in this
    // process, and its arrival stamps carry the event loop's lag (scripts/bench/cluster-faults.ts).
    const result = await runClusterFault(cluster!, { fault, recovery, maxHoldMs: 10_000 });
    expect(result.errors, 'calls that failed').to.deep.equal([]);
    expect(result.ranOnce, 'calls that ran exactly once').to.equal(result.scheduled);
    expect(result.ranTwice).to.equal(0);
    // A call that outlasts maxHoldMs stops counting at its bound (by design): arrivals over the limit would not be the fault's.
    expect(result.slowCalls, 'calls that outlasted maxHoldMs (machine too loaded for this run to tell)').to.equal(0);
    return result;
  }

  it('a master killed with calls in flight: its replica takes over, nothing over the limit', async () => {
    const result = await run('kill');
    expect(result.faultMs).to.be.above(0);
    expect(result.overLimit).to.equal(0);
  });

  it('FLUSHALL on one master: its keys are found lost (or the epoch with them) and put back, nothing over the limit', async () => {
    const result = await run('flush');
    // Found key by key, or (when the namespace's epoch key lived on that master) as a whole.
    expect(result.keysRestored + result.recoveries).to.be.above(0);
    expect(result.overLimit).to.equal(0);
  });

  it('a replica that missed writes, promoted by CLUSTER FAILOVER FORCE: the keys it rolled back are put back', async () => {
    const result = await run('lag');
    expect(result.keysRestored).to.be.above(0);
    expect(result.overLimit).to.equal(0);
  });

  it('the same rollback without the journal (recovery: false) lets calls over the limit: the fault is real', async () => {
    const result = await run('lag', false);
    expect(result.overLimit).to.be.above(0);
  });
});
