package v1beta1

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"github.com/herald-lb/herald/api/v1beta2"
)

// AnnotationV1beta2Fields holds, on a BGPPeer converted down to v1beta1, the
// JSON of the v1beta2 spec fields v1beta1 cannot express (dynamicASN,
// localASN, interface, connectTime, passwordSecret, enableGracefulRestart,
// vrf, disableMP, dualStackAddressFamily), so converting back up is
// lossless. ConvertTo removes it.
const AnnotationV1beta2Fields = "metallb.io/v1beta2-fields"

// ConvertTo converts this v1beta1 BGPPeer to the v1beta2 hub
// (sigs.k8s.io/controller-runtime/pkg/conversion.Convertible). It returns an
// error when dst is not a *v1beta2.BGPPeer or the annotation written by
// ConvertFrom is not valid JSON.
func (p *BGPPeer) ConvertTo(dst conversion.Hub) error {
	hub, ok := dst.(*v1beta2.BGPPeer)
	if !ok {
		return fmt.Errorf("convert BGPPeer %s/%s to v1beta2: unexpected hub type %T", p.Namespace, p.Name, dst)
	}
	hub.ObjectMeta = *p.ObjectMeta.DeepCopy()
	hub.Spec = v1beta2.BGPPeerSpec{}
	if extra, ok := hub.Annotations[AnnotationV1beta2Fields]; ok {
		if err := json.Unmarshal([]byte(extra), &hub.Spec); err != nil {
			return fmt.Errorf("convert BGPPeer %s/%s to v1beta2: annotation %s: %w", p.Namespace, p.Name, AnnotationV1beta2Fields, err)
		}
		delete(hub.Annotations, AnnotationV1beta2Fields)
		if len(hub.Annotations) == 0 {
			hub.Annotations = nil
		}
	}
	s := p.Spec.DeepCopy()
	hub.Spec.MyASN = s.MyASN
	hub.Spec.PeerASN = s.PeerASN
	hub.Spec.PeerAddress = s.PeerAddress
	hub.Spec.SourceAddress = s.SourceAddress
	hub.Spec.PeerPort = s.PeerPort
	hub.Spec.HoldTime = s.HoldTime
	hub.Spec.KeepaliveTime = s.KeepaliveTime
	hub.Spec.RouterID = s.RouterID
	hub.Spec.Password = s.Password
	hub.Spec.BFDProfile = s.BFDProfile
	hub.Spec.EBGPMultiHop = s.EBGPMultiHop
	hub.Spec.NodeSelectors = nil
	for _, ns := range s.NodeSelectors {
		hub.Spec.NodeSelectors = append(hub.Spec.NodeSelectors, ns.toLabelSelector())
	}
	return nil
}

// ConvertFrom converts the v1beta2 hub to this v1beta1 BGPPeer. Fields
// v1beta1 cannot express are kept in the AnnotationV1beta2Fields annotation.
func (p *BGPPeer) ConvertFrom(src conversion.Hub) error {
	hub, ok := src.(*v1beta2.BGPPeer)
	if !ok {
		return fmt.Errorf("convert BGPPeer to v1beta1: unexpected hub type %T", src)
	}
	p.ObjectMeta = *hub.ObjectMeta.DeepCopy()
	s := hub.Spec.DeepCopy()
	p.Spec = BGPPeerSpec{
		MyASN:         s.MyASN,
		PeerASN:       s.PeerASN,
		PeerAddress:   s.PeerAddress,
		SourceAddress: s.SourceAddress,
		PeerPort:      s.PeerPort,
		HoldTime:      s.HoldTime,
		KeepaliveTime: s.KeepaliveTime,
		RouterID:      s.RouterID,
		Password:      s.Password,
		BFDProfile:    s.BFDProfile,
		EBGPMultiHop:  s.EBGPMultiHop,
	}
	for _, ls := range s.NodeSelectors {
		p.Spec.NodeSelectors = append(p.Spec.NodeSelectors, nodeSelectorFrom(ls))
	}
	extra := extraFields(s)
	if len(extra) == 0 {
		return nil
	}
	b, err := json.Marshal(extra)
	if err != nil {
		return fmt.Errorf("convert BGPPeer %s/%s to v1beta1: %w", hub.Namespace, hub.Name, err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationV1beta2Fields] = string(b)
	return nil
}

// extraFields is the JSON written to AnnotationV1beta2Fields: only the
// v1beta2-only fields, with myASN (not omitempty) left out.
func extraFields(s *v1beta2.BGPPeerSpec) map[string]any {
	m := map[string]any{}
	set := func(k string, v any, zero bool) {
		if !zero {
			m[k] = v
		}
	}
	set("dynamicASN", s.DynamicASN, s.DynamicASN == "")
	set("localASN", s.LocalASN, s.LocalASN == 0)
	set("interface", s.Interface, s.Interface == "")
	set("connectTime", s.ConnectTime, s.ConnectTime == nil)
	set("passwordSecret", s.PasswordSecret, s.PasswordSecret == nil)
	set("enableGracefulRestart", s.EnableGracefulRestart, !s.EnableGracefulRestart)
	set("vrf", s.VRF, s.VRF == "")
	set("disableMP", s.DisableMP, !s.DisableMP)
	set("dualStackAddressFamily", s.DualStackAddressFamily, !s.DualStackAddressFamily)
	return m
}

func (n NodeSelector) toLabelSelector() metav1.LabelSelector {
	ls := metav1.LabelSelector{MatchLabels: n.MatchLabels}
	for _, e := range n.MatchExpressions {
		ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{
			Key:      e.Key,
			Operator: metav1.LabelSelectorOperator(e.Operator),
			Values:   e.Values,
		})
	}
	return ls
}

func nodeSelectorFrom(ls metav1.LabelSelector) NodeSelector {
	n := NodeSelector{MatchLabels: ls.MatchLabels}
	for _, e := range ls.MatchExpressions {
		n.MatchExpressions = append(n.MatchExpressions, MatchExpression{
			Key:      e.Key,
			Operator: string(e.Operator),
			Values:   e.Values,
		})
	}
	return n
}
