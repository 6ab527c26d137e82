--[[
  batch: the decisions, completions and confirmations one process has for Redis at one moment, in
  one atomic step: operations on several keys (a standalone Redis), or on one key (a Cluster, where
  one script only reaches keys of one slot). Each operation is described in includes/ops.lua.

  KEYS     for each key used, its three keys: log, meta, flight (see includes/ops.lua); then, when
           EPOCH is not empty, the namespace's epoch key (epoch.lua)
  ARGV[1]  EPOCH  the epoch value the caller knows ('' = no check)
  ARGV[2]  N      number of operations, followed by the operations: TYPE ('r' reserve, 's' settle,
                  'c' confirm), K (the key: KEYS[3K-2 .. 3K]), then the operation's arguments

  Returns { 3 } when the epoch changed (the store lost its data; nothing was done), else
  { 1, reply_1, ..., reply_N }.
]]
--- @include "log"
--- @include "ops"

local epoch_key = nil
if ARGV[1] ~= '' then epoch_key = KEYS[#KEYS] end
local ready = vt_epoch(epoch_key, ARGV[1])
if ready == 'lost' then return { 3 } end

local now = vt_now()
local out = { 1 }
local i = 3
for n = 1, tonumber(ARGV[2]) do
  local op = ARGV[i]
  local k = tonumber(ARGV[i + 1])
  local log, meta, flight = KEYS[3 * k - 2], KEYS[3 * k - 1], KEYS[3 * k]
  local reply
  if op == 'r' then
    reply, i = vt_reserve(log, meta, flight, now, ready, ARGV, i + 2)
  elseif op == 's' then
    reply, i = vt_settle_op(log, meta, flight, now, ARGV, i + 2)
  else
    reply, i = vt_confirm(log, meta, flight, now, ready, ARGV, i + 2)
  end
  out[n + 1] = reply
end
return out
