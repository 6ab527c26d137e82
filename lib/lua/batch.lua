--[[
  batch: the decisions and completions one process has for Redis at one moment, in one atomic
  step: operations on several keys (a standalone Redis), or on one key (a Cluster, where one
  script only reaches keys of one slot). Each operation is described in its include.

  KEYS     for each key used, its two keys: log, meta (includes/log.lua); then, when EPOCH is not
           empty, the namespace's epoch key (epoch.lua)
  ARGV[1]  EPOCH    the epoch value the caller knows ('' = no check)
  ARGV[2]  TAG      this process's member suffix (members are <number><TAG>), which also names it
                    in a key's list of waiting processes
  ARGV[3]  CHANNEL  the namespace's channel, where completions wake waiting processes
  ARGV[4]  N        number of operations, followed by the operations: TYPE ('d' decide,
                    'c' complete, 'l' leave), K (the key: KEYS[2K-1 .. 2K]), then the operation's
                    arguments ('l': KEY, the encoded user key: this process no longer waits on it)

  Returns { 3 } when the epoch changed (the store lost its data; nothing was done), else
  { 1, reply_1, ..., reply_N }.
]]
--- @include "log"
--- @include "buckets"
--- @include "waiters"
--- @include "decide"
--- @include "complete"

local epoch_key = nil
if ARGV[1] ~= '' then epoch_key = KEYS[#KEYS] end
local ready = vt_epoch(epoch_key, ARGV[1])
if ready == 'lost' then return { 3 } end

local tag, channel = ARGV[2], ARGV[3]
local now = nil
local out = { 1 }
local i = 5
for n = 1, tonumber(ARGV[4]) do
  local op = ARGV[i]
  local k = tonumber(ARGV[i + 1])
  local log, meta = KEYS[2 * k - 1], KEYS[2 * k]
  local reply
  if op == 'd' then
    -- Completions come first in a batch and need no clock: TIME only when a decision needs it.
    now = now or vt_now()
    reply, i = vt_decide(log, meta, now, ready, tag, channel, ARGV, i + 2)
  elseif op == 'c' then
    reply, i = vt_complete(log, meta, channel, ARGV, i + 2)
  else
    local value = redis.call('HGET', meta, 'w')
    if value then vt_waiters_update(meta, value, tag, 0, 0, channel, ARGV[i + 2]) end
    reply, i = 0, i + 3
  end
  out[n + 1] = reply
end
return out
