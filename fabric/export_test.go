package fabric

// RegionKeyEpoch returns region id's key and epoch as the switch's map
// holds them (key 0: not known yet), for tests outside the package.
func RegionKeyEpoch(s *Switch, id uint32) (key, epoch uint64, ok bool) {
	r := s.memPool.mmu.regions[id]
	if r == nil {
		return 0, 0, false
	}
	return r.Key, r.Epoch, true
}
