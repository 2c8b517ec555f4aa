"""The recipe's baselines in verl: the reward-only estimators (COPO, MC-GRPO), COPO's and Div-R1's actor losses,
DIVER's shaped reward and Group Contrastive PO's reference injection, each selected by its own config keys."""
