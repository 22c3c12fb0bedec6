package leader

// logRole logs every change of role (and of the epoch while leading) and
// passes it to cfg.OnRole.
func logRole(cfg Config) func(Role, int64) {
	return func(r Role, epoch int64) {
		switch r {
		case RoleLeader:
			cfg.log().Info("leading: this replica publishes", "cluster", cfg.Cluster, "replica", cfg.ID, "epoch", epoch)
		case RoleFollower:
			cfg.log().Info("following: another replica publishes (or this one lost its session)", "cluster", cfg.Cluster, "replica", cfg.ID, "epoch", epoch)
		}
		if cfg.OnRole != nil {
			cfg.OnRole(r, epoch)
		}
	}
}
