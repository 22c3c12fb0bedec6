package leader

import "sync"

// logRole logs every change of role (and of the epoch while leading) and
// passes it to cfg.OnRole. A leader that released (a graceful stop) says
// so, rather than that another replica publishes: there may be none.
func logRole(cfg Config) func(Role, int64, bool) {
	var mu sync.Mutex
	last := RoleUnknown
	return func(r Role, epoch int64, released bool) {
		mu.Lock()
		same := r == last
		last = r
		mu.Unlock()
		switch {
		case r == RoleLeader && same:
			cfg.log().Info("still leading, in a new epoch (a rebalance this replica led through)", "cluster", cfg.Cluster, "replica", cfg.ID, "epoch", epoch)
		case r == RoleLeader:
			cfg.log().Info("leading: this replica publishes", "cluster", cfg.Cluster, "replica", cfg.ID, "epoch", epoch)
		case r == RoleFollower && released:
			cfg.log().Info("stepped down: this replica stops leading (a graceful stop); another replica, if one runs, leads at once", "cluster", cfg.Cluster, "replica", cfg.ID, "epoch", epoch)
		case r == RoleFollower:
			cfg.log().Info("following: another replica publishes (or this one lost its session)", "cluster", cfg.Cluster, "replica", cfg.ID, "epoch", epoch)
		}
		if cfg.OnRole != nil {
			cfg.OnRole(r, epoch)
		}
	}
}
