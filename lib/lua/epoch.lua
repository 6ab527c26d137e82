--[[
  epoch: the namespace's epoch, created if missing. Every decision checks it (vt_epoch): a store
  that lost its data (restart without persistence, FLUSHALL, failover to a replica that lagged)
  has none, so the next decision tells its caller, which puts back the calls it knows it made.

  KEYS[1]  epoch  string '<id>:<ready_ms>': decisions wait until ready_ms (store clock), so that
                  every live process has put back its calls before anything new is decided
  ARGV[1]  ID     a random id for a new epoch
  ARGV[2]  GRACE  ms from now until a new epoch is ready (0 for a namespace seen for the first time)

  Returns the epoch in force.
]]
local time = redis.call('TIME')
local now_ms = math.ceil(tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000)
local value = ARGV[1] .. ':' .. (now_ms + tonumber(ARGV[2]))
if redis.call('SET', KEYS[1], value, 'NX') then return value end
return redis.call('GET', KEYS[1])
