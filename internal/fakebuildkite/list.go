package fakebuildkite

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// listQuery is the builds-list filters Buildkite documents and kbgen uses.
type listQuery struct {
	states                 map[string]bool
	createdFrom, createdTo time.Time
	finishedFrom           time.Time
	meta                   map[string]string
	excludeJobs            bool
	page, perPage          int
}

func parseListQuery(r *http.Request) (listQuery, error) {
	q := r.URL.Query()
	lq := listQuery{states: map[string]bool{}, meta: map[string]string{}, page: 1, perPage: 30}
	for _, k := range []string{"state[]", "state"} {
		for _, v := range q[k] {
			for _, s := range strings.Split(v, ",") {
				if s != "" {
					lq.states[s] = true
				}
			}
		}
	}
	for name, dst := range map[string]*time.Time{"created_from": &lq.createdFrom, "created_to": &lq.createdTo, "finished_from": &lq.finishedFrom} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return lq, fmt.Errorf("%s: not an ISO 8601 time", name)
			}
			*dst = t
		}
	}
	for k, vs := range q {
		if key, ok := strings.CutPrefix(k, "meta_data["); ok {
			lq.meta[strings.TrimSuffix(key, "]")] = vs[0]
		}
	}
	lq.excludeJobs = q.Get("exclude_jobs") == "true"
	for name, dst := range map[string]*int{"page": &lq.page, "per_page": &lq.perPage} {
		if v := q.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return lq, fmt.Errorf("%s: not a positive number", name)
			}
			*dst = n
		}
	}
	lq.perPage = min(lq.perPage, 100)
	return lq, nil
}

func (lq *listQuery) match(b *build, st snapshot) bool {
	if len(lq.states) > 0 && !lq.states[st.build] {
		return false
	}
	if !lq.createdFrom.IsZero() && b.created.Before(lq.createdFrom) {
		return false
	}
	if !lq.createdTo.IsZero() && !b.created.Before(lq.createdTo) {
		return false
	}
	if !lq.finishedFrom.IsZero() && (!st.finished || st.ended.Before(lq.finishedFrom)) {
		return false
	}
	for k, v := range lq.meta {
		if b.body.MetaData[k] != v {
			return false
		}
	}
	return true
}

// HideFromList leaves build number out of every builds-list answer (a
// list index that lags or lost it); GET of the build still answers.
func (s *Server) HideFromList(number int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hidden == nil {
		s.hidden = map[int]bool{}
	}
	s.hidden[number] = true
}

// list answers GET …/builds: newest first, filtered, one page, with a Link
// header to the next page as Buildkite sends it.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": err.Error()})
		return
	}
	now := s.now()
	s.mu.Lock()
	var matched []*build
	for _, b := range s.builds {
		if s.hidden[b.number] {
			continue
		}
		if lq.match(b, s.stateLocked(b, now)) {
			matched = append(matched, b)
		}
	}
	s.mu.Unlock()
	sort.Slice(matched, func(i, j int) bool { return matched[i].number > matched[j].number })
	from := (lq.page - 1) * lq.perPage
	out := []any{}
	for i := from; i < len(matched) && i < from+lq.perPage; i++ {
		out = append(out, restBuild(s.buildJSON(matched[i], now), r))
	}
	if from+lq.perPage < len(matched) {
		next := *r.URL
		q := next.Query()
		q.Set("page", strconv.Itoa(lq.page+1))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, s.API.URL, next.RequestURI()))
	}
	writeJSON(w, http.StatusOK, out)
}
