-- Argo CD health check for tern.dev's kinds: AgentSession, AgentTrigger,
-- AgentBudget and AgentSessionTemplate (one script, by obj.kind). Install it
-- in argocd-cm under "resource.customizations.health.tern.dev_AgentSession",
-- "..._AgentTrigger", "..._AgentBudget" and "..._AgentSessionTemplate" (see
-- docs/gitops.md). Reads only status written by tern-operator.
hs = {}
local st = obj.status

-- A trigger or a budget: Progressing until tern-operator has seen the latest
-- spec, Degraded when its Ready condition is False; nil when neither.
local function not_settled(what)
  if st == nil or st.conditions == nil then
    return {status = "Progressing", message = "waiting for tern-operator to pick the " .. what .. " up"}
  end
  if obj.metadata ~= nil and obj.metadata.generation ~= nil and
     (st.observedGeneration == nil or st.observedGeneration < obj.metadata.generation) then
    return {status = "Progressing", message = "tern-operator has not yet seen the latest spec"}
  end
  for _, c in ipairs(st.conditions) do
    if c.type == "Ready" and c.status == "False" then
      return {status = "Degraded", message = (c.reason or "NotReady") .. ": " .. (c.message or "")}
    end
  end
  return nil
end
if obj.kind == "AgentSessionTemplate" then
  -- a template has no status: it is data that sessions copy once
  hs.status = "Healthy"
  hs.message = "template"
  return hs
end
if obj.kind == "AgentTrigger" then
  local unsettled = not_settled("trigger")
  if unsettled ~= nil then return unsettled end
  if obj.spec ~= nil and obj.spec.suspend == true then
    hs.status = "Suspended"
    hs.message = "suspended (spec.suspend)"
    return hs
  end
  hs.status = "Healthy"
  local n = (st.active ~= nil) and #st.active or 0
  hs.message = "last session " .. (st.lastSession or "none") .. ", " .. n .. " active"
  return hs
end
if obj.kind == "AgentBudget" then
  -- Degraded: an invalid spec or time zone, so the budget is not enforced
  local unsettled = not_settled("budget")
  if unsettled ~= nil then return unsettled end
  -- a used-up budget is working as intended: Healthy, with the numbers
  local d = st.display or {}
  local w = st.window or {}
  hs.status = "Healthy"
  hs.message = "window " .. (w.key or "?") .. ": concurrent " .. (d.concurrentSessions or "-") ..
    ", started " .. (d.sessionsStarted or "-") .. ", tokens " .. (d.tokens or "-") ..
    ", cost " .. (d.cost or "-") .. ", queued " .. tostring(st.queued or 0)
  return hs
end
if st ~= nil and st.reason == "TemplateNotFound" then
  hs.status = "Degraded"
  hs.message = "blocked: TemplateNotFound: " .. (st.message or "")
  return hs
end
if st == nil or st.conditions == nil then
  hs.status = "Progressing"
  hs.message = "waiting for tern-operator to pick the session up"
  return hs
end
if obj.metadata ~= nil and obj.metadata.generation ~= nil and
   (st.observedGeneration == nil or st.observedGeneration < obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "tern-operator has not yet seen the latest spec"
  return hs
end
local cond = {}
for _, c in ipairs(st.conditions) do
  cond[c.type] = c
end
local function is_true(t)
  return cond[t] ~= nil and cond[t].status == "True"
end
if is_true("Failed") then
  hs.status = "Degraded"
  hs.message = (cond["Failed"].message ~= nil and cond["Failed"].message ~= "") and
    cond["Failed"].message or ("failed: " .. (cond["Failed"].reason or "unknown"))
  return hs
end
if st.phase == "Blocked" then
  hs.status = "Degraded"
  hs.message = "blocked: " .. (st.reason or "unknown") .. ": " .. (st.message or "")
  return hs
end
if is_true("ApprovalPending") then
  hs.status = "Suspended"
  local p = st.pendingApproval or {}
  hs.message = "waiting for approval " .. (p.id or "?") .. ": " .. (p.summary or "")
  return hs
end
if st.phase == "Queued" then
  -- an AgentBudget holds it back: it goes on by itself when the budget has room
  hs.status = "Suspended"
  hs.message = "queued: " .. (st.reason or "unknown") .. ": " .. (st.message or "")
  return hs
end
if st.phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = "suspended (spec.suspend)"
  return hs
end
if is_true("Completed") then
  hs.status = "Healthy"
  hs.message = (st.result ~= nil and st.result.summary ~= nil) and st.result.summary or "completed"
  return hs
end
hs.status = "Progressing"
hs.message = "phase " .. (st.phase or "Pending")
return hs
