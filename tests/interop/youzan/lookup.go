package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// peer is a node as nsqlookupd's /lookup lists it (youzan's PeerInfo, the fields used here).
type peer struct {
	BroadcastAddress string `json:"broadcast_address"`
	TCPPort          int    `json:"tcp_port"`
}

func (p peer) addr() string {
	return net.JoinHostPort(p.BroadcastAddress, strconv.Itoa(p.TCPPort))
}

// lookupMeta is /lookup's `meta` object (with metainfo=...).
type lookupMeta struct {
	PartitionNum int  `json:"partition_num"`
	Replica      int  `json:"replica"`
	Ordered      bool `json:"ordered"`
}

// lookupResult is the youzan /lookup payload.
type lookupResult struct {
	Producers  []peer          `json:"producers"`
	Partitions map[string]peer `json:"partitions"`
	Meta       lookupMeta      `json:"meta"`
}

// leaders maps partition id to its leader's TCP address.
func (r *lookupResult) leaders() map[int]string {
	out := make(map[int]string, len(r.Partitions))
	for key, p := range r.Partitions {
		pid, err := strconv.Atoi(key)
		if err == nil && pid >= 0 {
			out[pid] = p.addr()
		}
	}
	return out
}

// sortedPids lists the partition ids of a leaders map in order.
func sortedPids(m map[int]string) []int {
	pids := make([]int, 0, len(m))
	for pid := range m {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// lookup asks lookupd where topic's partitions are, as youzan's go-nsq does: access "w" for a
// producer, "r" for a consumer, always with metainfo and the version-1.0 Accept header.
func lookup(lookupd, topic, access string) (*lookupResult, error) {
	q := url.Values{"topic": {topic}, "access": {access}, "metainfo": {"true"}}
	req, err := http.NewRequest("GET", "http://"+lookupd+"/lookup?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/vnd.nsq; version=1.0")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("lookup %s: HTTP %d %s", topic, resp.StatusCode, body)
	}
	var out lookupResult
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("lookup %s: %v", topic, err)
	}
	return &out, nil
}

// lookupUntil repeats lookup until every one of meta.partition_num partitions has a leader (a
// topic just created on lookupd takes a moment to be registered by its leaders).
func lookupUntil(lookupd, topic, access string, deadline time.Time) (*lookupResult, error) {
	for {
		res, err := lookup(lookupd, topic, access)
		if err == nil && res.Meta.PartitionNum > 0 && len(res.leaders()) >= res.Meta.PartitionNum {
			return res, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("lookup %s: %d of %d partitions have a leader",
					topic, len(res.leaders()), res.Meta.PartitionNum)
			}
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
