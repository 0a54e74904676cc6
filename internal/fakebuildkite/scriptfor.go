package fakebuildkite

// SetScriptFor makes each build created from now on follow f(its env): a
// test whose builds must differ (each canary's agent and time) tells them
// apart by what the client put in the env. nil goes back to SetScript's.
func (s *Server) SetScriptFor(f func(env map[string]string) Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scriptFor = f
}
