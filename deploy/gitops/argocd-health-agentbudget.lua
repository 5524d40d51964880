-- Argo CD health check for tern.dev/AgentBudget.
-- Install: argocd-cm, key "resource.customizations.health.tern.dev_AgentBudget"
-- (see docs/gitops.md). Reads only status written by tern-operator.
hs = {}
local st = obj.status
if st == nil or st.conditions == nil then
  hs.status = "Progressing"
  hs.message = "waiting for tern-operator to pick the budget up"
  return hs
end
if obj.metadata ~= nil and obj.metadata.generation ~= nil and
   (st.observedGeneration == nil or st.observedGeneration < obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "tern-operator has not yet seen the latest spec"
  return hs
end
local ready = nil
for _, c in ipairs(st.conditions) do
  if c.type == "Ready" then
    ready = c
  end
end
if ready ~= nil and ready.status == "False" then
  -- an invalid spec or time zone: the budget is not enforced
  hs.status = "Degraded"
  hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
  return hs
end
-- a used-up budget is working as intended: Healthy, with the numbers
local d = st.display or {}
local w = st.window or {}
hs.status = "Healthy"
hs.message = "window " .. (w.key or "?") .. ": concurrent " .. (d.concurrentSessions or "-") ..
  ", started " .. (d.sessionsStarted or "-") .. ", tokens " .. (d.tokens or "-") ..
  ", cost " .. (d.cost or "-") .. ", queued " .. tostring(st.queued or 0)
return hs
