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
  ARGV[1]  ID     a random id for a new epoch (the script adds '@<replid>' with NAMES); with MODE
                  'extend', the id of the epoch to extend
  ARGV[2]  GRACE  ms from now until a new epoch is ready
  ARGV[3]  MODE   'lost': a process found the data lost; a missing epoch is created ready GRACE
                  from now.
                  'first': a process that never saw the namespace looks it up; a missing epoch
                  means a new namespace, or a loss no live process has noticed yet. It is created
                  ready at once, unless this Redis shows a sign of a loss (vt_lost_sign): then
                  GRACE from now, time for the processes that hold calls to notice and hold it longer.
                  A Redis that started less than GRACE ago is such a sign only while another
                  client than the caller's is connected (a process that knew the namespace before
                  a restart reconnects to find the loss; so does this process's own subscriber,
                  which only makes it wait): a process alone on a fresh Redis is ready at once.
                  'extend': moves the ready time of epoch ID to at least GRACE from now (a process
                  still putting back its calls keeps every decision waiting); an epoch with another
                  id, or none, is left as it is.
  ARGV[4]  NAMES  '1': the epoch names the Redis that created it, and one that names another is
                  taken as none (a standalone Redis: every decision there checks the epoch). On a
                  Cluster ('0') no script but this one reads the epoch, and each key names its
                  Redis itself (meta `r`).

  The epoch has no time to live: only a loss removes it (a restart without persistence, FLUSHALL,
  or an `allkeys-*` eviction), so a namespace left idle for any time never looks like a lost one.
  Under a `volatile-*` policy it cannot be evicted. One key of a few bytes per namespace.

  Returns the epoch in force (nil when 'extend' found none).
]]
--- @include "log"

local time = redis.call('TIME')
local now_ms = math.ceil(tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000)
local ready = now_ms + tonumber(ARGV[2])
local mode = ARGV[3]

-- Whether this Redis may have lost data lately: it started GRACE ago or less (a restart without
-- persistence) and another client is connected, it was a replica promoted (a second replication
-- id), it evicted keys, or someone ran FLUSHALL or FLUSHDB (counted since it started).
local function vt_lost_sign()
  -- A Redis that refuses INFO (an ACL without it) shows nothing: taken as a sign.
  for _, section in ipairs({ 'server', 'replication', 'stats', 'commandstats' }) do
    if type(redis.pcall('INFO', section)) ~= 'string' then return true end
  end
  local server = redis.call('INFO', 'server')
  local uptime = tonumber(string.match(server, 'uptime_in_seconds:(%d+)') or 0)
  if uptime * 1000 < tonumber(ARGV[2]) then
    local clients = redis.pcall('INFO', 'clients')
    if type(clients) ~= 'string' then return true end
    if tonumber(string.match(clients, 'connected_clients:(%d+)') or 0) > 1 then return true end
  end
  local replid2 = string.match(redis.call('INFO', 'replication'), 'master_replid2:(%x+)') or ''
  if string.find(replid2, '[1-9a-f]') then return true end
  if tonumber(string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)') or 0) > 0 then return true end
  local commands = redis.call('INFO', 'commandstats')
  for _, name in ipairs({ 'flushall', 'flushdb' }) do
    if tonumber(string.match(commands, 'cmdstat_' .. name .. ':calls=(%d+)') or 0) > 0 then return true end
  end
  return false
end

local names = ARGV[4] == '1'
local replid = names and vt_replid() or ''
local value = redis.call('GET', KEYS[1])
-- Replicated from another Redis before a failover: as good as none, and a sign of a loss.
local moved = names and value and vt_epoch_moved(value, replid)
if moved then value = false end
if mode == 'extend' then
  if value == false then return nil end
  local id, old = string.match(value, '^(.*):(%d+)$')
  if id ~= ARGV[1] or tonumber(old) >= ready then return value end
  value = ARGV[1] .. ':' .. ready
  redis.call('SET', KEYS[1], value)
  return value
end
if value then return value end
if mode == 'first' and not moved and not vt_lost_sign() then ready = now_ms end
if names then value = ARGV[1] .. '@' .. replid .. ':' .. ready else value = ARGV[1] .. ':' .. ready end
redis.call('SET', KEYS[1], value)
return value
