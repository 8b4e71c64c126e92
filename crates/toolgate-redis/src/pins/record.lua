-- The start of the pin store's scripts that change a pin: `record` keeps an entry at the head
-- of the history (JSON, on the Redis server's clock) and forgets the oldest past `max`.

local function record(base, tool, event, fingerprint, max)
  local entry = '{"at_ms":' .. now .. ',"tool":' .. cjson.encode(tool) .. ',"event":"' .. event
    .. '","fingerprint":' .. cjson.encode(fingerprint) .. '}'
  redis.call('LPUSH', base .. ':history', entry)
  redis.call('LTRIM', base .. ':history', 0, max - 1)
end
