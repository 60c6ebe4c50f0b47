-- wrk script: 1 KiB puts through etcd's v3 JSON gateway (POST /v3/kv/put),
-- a fresh random 32-byte key per request (base64, as the gateway wants),
-- the same 1024-byte random value. The `done` hook prints one line:
--   WRK requests=N duration_us=N status_errors=N other_errors=N
--       p50_us=X p99_us=X p999_us=X
-- (status_errors: non-2xx answers; wrk counts them in requests).

local chars =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local enc = {}
for i = 0, 63 do
    enc[i] = chars:sub(i + 1, i + 1)
end

local function b64(s)
    local out = {}
    for i = 1, #s, 3 do
        local a, b, c = s:byte(i, i + 2)
        local n = a * 65536 + (b or 0) * 256 + (c or 0)
        out[#out + 1] = enc[math.floor(n / 262144) % 64] ..
            enc[math.floor(n / 4096) % 64] ..
            (b and enc[math.floor(n / 64) % 64] or "=") ..
            (c and enc[n % 64] or "=")
    end
    return table.concat(out)
end

local function random_bytes(n)
    local t = {}
    for i = 1, n do
        t[i] = string.char(math.random(0, 255))
    end
    return table.concat(t)
end

local next_id = 0
function setup(thread)
    next_id = next_id + 1
    thread:set("thread_id", next_id)
end

local value64
local headers = { ["Content-Type"] = "application/json" }

function init(args)
    math.randomseed(os.time() * 1000 + (thread_id or 0))
    value64 = b64(random_bytes(1024))
end

function request()
    local body = '{"key":"' .. b64(random_bytes(32)) .. '","value":"' ..
        value64 .. '"}'
    return wrk.format("POST", "/v3/kv/put", headers, body)
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "WRK requests=%d duration_us=%d status_errors=%d other_errors=%d " ..
        "p50_us=%.1f p99_us=%.1f p999_us=%.1f\n",
        summary.requests, summary.duration, e.status,
        e.connect + e.read + e.write + e.timeout,
        latency:percentile(50), latency:percentile(99),
        latency:percentile(99.9)))
end
