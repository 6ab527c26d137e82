--[[
  epoch: the namespace's epoch. Every decision on a standalone Redis checks it (vt_epoch): a store
  that lost its data (restart without persistence, FLUSHALL) has none, or another one, so the next
  decision tells its caller, which puts back the calls it knows it made.

  KEYS[1]  epoch  string '<id>:<ready_ms>', where <id> is '<random>@<replid>' on a standalone
                  Redis: the replication id of the Redis that created it ('' where INFO is denied;
                  '<random>' alone on a Cluster, and in epochs of earlier versions). Decisions wait until
                  ready_ms (store clock), so that every live process has put back its calls before
                  anything new is decided. An epoch that names another Redis than this one came with
                  a failover (a replica promoted, which may have missed the latest writes): it counts
                  as no epoch, so the namespace is recovered as after a loss (vt_epoch, includes/log.lua).
                  With MODE 'claim', unused.
  KEYS[2]  young  hash '<prefix>:young', standalone only (none on a Cluster), written only while this
                  Redis is young (up less than GRACE): what tells a start-up from a restart that lost
                  data (docs/design.md §9, "A start-up or a loss"):
                    'c:<token>'  a connection claimed by a process that held no calls when it claimed
                                 it, from that connection (one token per client object);
                    'k'          connections closed (INFO: received - connected - replicas) when the
                                 first claim was made: a claimed connection that closed since would
                                 leave a claim without its connection, so then no claim is trusted;
                    'e:<epoch key>'  that epoch was created on this Redis: if it is missing again, it
                                 was removed here (a key found lost), a loss;
                    'p:<epoch key>'  '<id>': that epoch is provisional, made to wait only because some
                                 connection was not claimed yet; 'first' makes it ready at once once
                                 every connection is claimed, unless a process reported a loss there
                                 ('lost', 'extend': the field goes).
                  It expires GRACE + 1 s after its last write, once it can no longer be read.
  KEYS[3]  mark   the namespace's mark (includes/log.lua), standalone only: made with a new epoch
                  where it is missing (a new namespace, or one that lost its data), so that a
                  namespace whose mark is missing is one whose decisions read every key's meta.
  ARGV[1]  ID     a random id for a new epoch (the script adds '@<replid>' with NAMES); with MODE
                  'extend', the id of the epoch to extend
  ARGV[2]  GRACE  ms from now until a new epoch is ready
  ARGV[3]  MODE   'lost': a process found the data lost; a missing epoch is created ready GRACE
                  from now.
                  'first': a process that never saw the namespace looks it up; a missing epoch
                  means a new namespace, or a loss no live process has noticed yet. It is created
                  ready at once, unless this Redis shows a sign of a loss (vt_lost_sign): then
                  GRACE from now, time for the processes that hold calls to notice and hold it longer.
                  A Redis that started less than GRACE ago (a restart without persistence, after
                  which the processes that hold calls reconnect to find the loss) is such a sign
                  while a connection is not claimed (KEYS[2]): the epoch is then provisional, and a
                  later 'first' that finds every connection claimed makes it ready at once. On a
                  Cluster (no KEYS[2]) it is a sign while another client than the caller's is
                  connected.
                  'extend': moves the ready time of epoch ID to at least GRACE from now (a process
                  still putting back its calls keeps every decision waiting); an epoch with another
                  id, or none, is left as it is.
                  'claim': only claims the caller's connection (CLAIM), on a young Redis.
  ARGV[4]  NAMES  '1': the epoch names the Redis that created it, and one that names another is
                  taken as none (a standalone Redis: every decision there checks the epoch). On a
                  Cluster ('0') no script but this one reads the epoch, and each key names its
                  Redis itself (meta `r`).
  ARGV[5]  CLAIM  'first', 'claim': the token of the caller's client object when no store of its
                  process on that client holds calls (its journal is empty), else ''.

  The epoch has no time to live: only a loss removes it (a restart without persistence, FLUSHALL,
  or an `allkeys-*` eviction), so a namespace left idle for any time never looks like a lost one.
  Under a `volatile-*` policy it cannot be evicted. One key of a few bytes per namespace.

  Returns the epoch in force (nil when 'extend' found none); with 'first', { epoch, provisional
  (1 or 0) }; with 'claim', nil.
]]
--- @include "log"

local time = redis.call('TIME')
local now_ms = math.ceil(tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000)
local grace = tonumber(ARGV[2])
local ready = now_ms + grace
local mode = ARGV[3]
local young_key = KEYS[2]

local function vt_info_number(section, field)
  local info = redis.pcall('INFO', section)
  if type(info) ~= 'string' then return nil end
  return tonumber(string.match(info, field .. ':(%d+)') or 0)
end

-- Up less than GRACE: what a restart without persistence looks like, and a start-up too.
local function vt_young()
  local uptime = vt_info_number('server', 'uptime_in_seconds')
  return uptime ~= nil and uptime * 1000 < grace
end

-- Connections this Redis accepted that are closed now (nil where INFO is denied).
local function vt_closed()
  local received = vt_info_number('stats', 'total_connections_received')
  local connected = vt_info_number('clients', 'connected_clients')
  local replicas = vt_info_number('replication', 'connected_slaves')
  if received == nil or connected == nil or replicas == nil then return nil end
  return received - connected - replicas
end

-- Claims the caller's connection (young Redis only: nothing reads the claims later).
local function vt_claim()
  if young_key == nil or ARGV[5] == nil or ARGV[5] == '' or not vt_young() then return end
  local closed = vt_closed()
  if closed == nil then return end
  redis.call('HSETNX', young_key, 'k', closed)
  redis.call('HSET', young_key, 'c:' .. ARGV[5], 1)
  redis.call('PEXPIRE', young_key, grace + 1000)
end

-- Whether every connection to this Redis is claimed: no claimed connection closed since the first
-- claim (then each claim is a distinct live connection), and no more connections than claims.
local function vt_all_claimed()
  local fields = redis.call('HGETALL', young_key)
  local claims, closed_then = 0, nil
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'c:' then claims = claims + 1 end
    if fields[i] == 'k' then closed_then = tonumber(fields[i + 1]) end
  end
  if closed_then == nil or vt_closed() ~= closed_then then return false end
  return vt_info_number('clients', 'connected_clients') <= claims
end

-- Whether this Redis may have lost data lately: 'unclaimed' when it is young (a restart without
-- persistence) and some connection is not claimed; true when it is young and another client is
-- connected on a Cluster (no claims there), when it was a replica promoted (a second replication id), evicted keys, someone ran
-- FLUSHALL or FLUSHDB (counted since it started), or (CREATED) the epoch was created here before.
local function vt_lost_sign(created)
  -- A Redis that refuses INFO (an ACL without it) shows nothing: taken as a sign.
  for _, section in ipairs({ 'server', 'replication', 'stats', 'commandstats', 'clients' }) do
    if type(redis.pcall('INFO', section)) ~= 'string' then return true end
  end
  if created then return true end
  local replid2 = string.match(redis.call('INFO', 'replication'), 'master_replid2:(%x+)') or ''
  if string.find(replid2, '[1-9a-f]') then return true end
  if tonumber(string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)') or 0) > 0 then return true end
  local commands = redis.call('INFO', 'commandstats')
  for _, name in ipairs({ 'flushall', 'flushdb' }) do
    if tonumber(string.match(commands, 'cmdstat_' .. name .. ':calls=(%d+)') or 0) > 0 then return true end
  end
  if vt_young() then
    if young_key == nil then
      if vt_info_number('clients', 'connected_clients') > 1 then return true end
    elseif not vt_all_claimed() then
      return 'unclaimed'
    end
  end
  return false
end

if mode == 'claim' then
  vt_claim()
  return nil
end

local names = ARGV[4] == '1'
local replid = names and vt_replid() or ''
local value = redis.call('GET', KEYS[1])
-- Replicated from another Redis before a failover: as good as none, and a sign of a loss.
local moved = names and value and vt_epoch_moved(value, replid)
if moved then value = false end
local provisional = 'p:' .. KEYS[1]
-- A process reports a loss: no start-up can make this epoch ready early any more.
if mode ~= 'first' and young_key ~= nil then redis.call('HDEL', young_key, provisional) end
if mode == 'extend' then
  if value == false then return nil end
  local id, old = string.match(value, '^(.*):(%d+)$')
  if id ~= ARGV[1] or tonumber(old) >= ready then return value end
  value = ARGV[1] .. ':' .. ready
  redis.call('SET', KEYS[1], value)
  return value
end
if mode == 'first' then vt_claim() end
if value then
  if mode ~= 'first' then return value end
  -- A provisional epoch (its id under 'p:'): ready at once as soon as every connection is claimed.
  local id, old = string.match(value, '^(.*):(%d+)$')
  if young_key == nil or tonumber(old) <= now_ms or redis.call('HGET', young_key, provisional) ~= id then return { value, 0 } end
  local sign = vt_lost_sign(false)
  if sign then return { value, sign == 'unclaimed' and 1 or 0 } end
  value = id .. ':' .. now_ms
  redis.call('SET', KEYS[1], value)
  redis.call('HDEL', young_key, provisional)
  return { value, 0 }
end
local sign = false
if mode == 'first' then
  local created = young_key ~= nil and redis.call('HEXISTS', young_key, 'e:' .. KEYS[1]) == 1
  if moved then sign = true else sign = vt_lost_sign(created) end
  if not sign then ready = now_ms end
end
local id = ARGV[1]
if names then id = id .. '@' .. replid end
value = id .. ':' .. ready
redis.call('SET', KEYS[1], value)
if KEYS[3] ~= nil then
  redis.call('HSETNX', KEYS[3], 'm', 0)
  redis.call('HSETNX', KEYS[3], 'b', 0)
end
if young_key ~= nil and vt_young() then
  redis.call('HSET', young_key, 'e:' .. KEYS[1], 1)
  if sign == 'unclaimed' then redis.call('HSET', young_key, provisional, id) end
  redis.call('PEXPIRE', young_key, grace + 1000)
end
if mode == 'first' then return { value, sign == 'unclaimed' and 1 or 0 } end
return value
