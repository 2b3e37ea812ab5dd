-- POST the JSON body in $WRK_BODY; at the end print one JSON line with latency percentiles (us).
wrk.method = "POST"
wrk.body = os.getenv("WRK_BODY")
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("WRK_AUTH")
if auth ~= nil and auth ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. auth
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_JSON {\"requests\": %d, \"duration_us\": %d, \"bytes\": %d, \"p50_us\": %d, \"p90_us\": %d, " ..
    "\"p99_us\": %d, \"max_us\": %d, \"mean_us\": %.1f, \"non_2xx\": %d, \"connect_errors\": %d, " ..
    "\"read_errors\": %d, \"write_errors\": %d, \"timeouts\": %d}\n",
    summary.requests, summary.duration, summary.bytes, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean, e.status, e.connect, e.read, e.write, e.timeout))
end
