"""The sentence of each paper that a reproduction's claims check, quoted from the paper's text (the seeds under
/work/shared/seeds, spec: papers/<paper>.md) with where it stands. The text versions carry no page numbers, so the
place is the section, table or figure. A claim line whose check is narrower than its entry's sentence says how
(Claim.narrower); a check of the spec's own (a proxy target) says that it is not the paper's."""

from __future__ import annotations

QUOTES = {
    # ------------------------------------------------------------------ LoSAC (Chen et al., TNNLS 2023)
    "losac/table2": '"LoSAC requires much fewer communication rounds than SCAFFOLD to reach a given accuracy. In particular, '
                    'the communication efficiency is improved by more than 300% for ESR case and 100% in average for all '
                    'cases." (§5.3.1, Table 2; loss and accuracy "measured at round 500", Table 2 caption)',
    "losac/fig2": '"when the data is more heterogenous (namely c% is larger), both FedAvg and FedSage suffers from the data '
                  'heterogeneity problem more seriously. For SCAFFOLD, MimeSVRG and LoSAC [...] the data heterogeneity problem '
                  'has the little impact on the performance. [...] FedCM also has the impact of data heterogeneity, but the '
                  'impact is not as serious as FedAvg and FedSage." (§5.2.1, Fig. 2)',
    "losac/fig3": '"the non-IID data has significantly degraded the performances of FedAvg and MimeSVRG" (§5.2.1, Figs. 3-4); '
                  'that LoSAC outperforms SCAFFOLD is the spec\'s reading of the figures (losac.md §6.3)',
    "losac/fig4": '"the non-IID data has significantly degraded the performances of FedAvg and MimeSVRG" (§5.2.1, Figs. 3-4); '
                  'that LoSAC outperforms SCAFFOLD is the spec\'s reading of the figures (losac.md §6.3)',
    "losac/fig5": 'the spec\'s reading of §5.2.2 and Fig. 5 (losac.md §6.3): on HAR LoSAC with T = 2 beats SCAFFOLD with T = 8; '
                  'on ESR SCAFFOLD and FedAvg are "significantly affected by model divergence" while LoSAC "performs remarkably"',
    "losac/fig6": '"both DSGD and MimeSVRG are vulnerable to the DLG since the estimated data samples are more and more '
                  'approaching to the true data samples. [...] the estimated data samples in FedAvg, SCAFFOLD and LoSAC are more '
                  'and more divergent from the true data samples" (§5.4, Fig. 6)',
    "losac/fig7": '"SCAFFOLD [...] cannot precisely recover the ground truth matrix, i.e., while the recovery matrix error is '
                  'large, the rank of the estimated matrix significantly differs from the rank of the ground truth matrix. For '
                  'LoSAC-Prox [...] it has the smallest recovery error and the EXACT rank with X_G." (§5.5, Fig. 7); FedADMM\'s '
                  '"performance is substantially degraded" (ibid.)',
    # ------------------------------------------------------------------ composite FL (non-convex composite FL)
    "composite/fig2": '"When tau = 1 [...] Both FedDA and our algorithm converge to machine precision. The same step size setting '
                      'ensures that both algorithms converge at exactly the same rate. [...] FedMid performs the worst [...] '
                      'Fast-FedDA converges slowly due to its decaying step sizes. When tau > 1 [...] Our algorithm still achieves '
                      'precise convergence and requires fewer communication rounds [...] FedDA [...] only converges to a '
                      'neighborhood of the first-order stationary points" (§4, Fig. 2; the values of tau are lost in the text)',
    "composite/fig3": '"when we use stochastic gradients, our algorithm also converges to a neighborhood [...] When we increase the '
                      'batch size from 1 to 20, the convergence precision of our algorithm improves. The other algorithms perform '
                      'worse due to client drift and/or the use of decaying step sizes." (§4, Fig. 3)',
    "composite/fig4": 'the spec\'s reading of Fig. 4 (composite.md §6): for both tau the proposed method "reaches higher accuracy '
                      'in fewer rounds" than FedDA',
    # ------------------------------------------------------------------ FedADMM (Gong, Li, Freris, ICDE 2022)
    "fedadmm/table3": '"FedADMM consistently outperforms all baseline methods in all cases tested. In specific, the communication '
                      'savings achieved by FedADMM compared to the best baseline method in each case averages 72%." (§V-B, Table '
                      'III); "reduced by up to 87%" (abstract); Table III\'s Reduction row: 47.4%-86.9%; its speed-ups over FedSGD '
                      '(FMNIST (1000) IID: 390 / 3 = 130x)',
    "fedadmm/table4": '"Table IV and Fig. 7 indicate that a more accurate global model can be obtained by increasing the amount of '
                      'local training." (§V-C, Table IV)',
    "fedadmm/table5": '"The proximal coefficient rho in FedProx has to be carefully tuned [...] the best rho value (0.01) for FedProx '
                      'in the FMNIST dataset gives the worst performance for MNIST in the 200-client setting. [...] FedADMM dominates '
                      'all tested instances of FedProx with fixed rho = 0.01." (§V-C, Table V)',
    "fedadmm/fig3": '"We conclude that the performance gap of FedADMM increases with the client population." (Fig. 3 caption)',
    "fedadmm/fig4": '"Number of rounds to reach a prescribed accuracy for variable client population along with the reduction of '
                    'FedADMM over the best baseline method." (Fig. 4 caption); "a larger improvement of FedADMM over baseline '
                    'methods at larger scales" (§V-B)',
    "fedadmm/fig5": '"In all scenarios, FedADMM consistently outperforms all baseline methods even with no hyperparameter tuning." '
                    '(Fig. 5 caption)',
    "fedadmm/fig6": '"when data distributions are IID across clients, all choices of eta result in similar performance [...] This is '
                    'reflected by the stalling in the case of setting eta = 1.5. The nominal value eta = 1.0 showcases consistent '
                    'performance in all cases. [...] a decrease of the step size serves to incorporate past information in a finer '
                    'fashion, thus improving the test accuracy." (§V-C, Fig. 6)',
    "fedadmm/fig7": '"a more accurate global model can be obtained by increasing the amount of local training" (§V-C, Fig. 7)',
    "fedadmm/fig8": '"Warm starting local training with the local model w_i^t yields superior results" (Fig. 8 caption)',
    "fedadmm/fig9": '"A smaller value (0.01) at initial stages of training allows efficient incorporation of local data when the '
                    'global model is not informed, while an increase of rho at later stages reduces discrepancies between client '
                    'models and the global model." (§V-C, Fig. 9)',
    "fedadmm/fig10": '"FedADMM achieves the best performance over baseline algorithms (E = 10, B = 50)." (Fig. 10 caption)',
    # ------------------------------------------------------------------ FedSpeed (Sun, MPhil thesis)
    "fedspeed/table4_2": '"Our proposed FedSpeed outperforms on each dataset on both IID and non-IID settings." (§4, Table 4.2)',
    "fedspeed/table4_4": 'Table 4.4\'s rounds to the targets (FedSpeed 280 / 380 rounds to 85% on CIFAR-10 100-10% IID / DIR, the '
                         'fewest of the table\'s methods at the higher targets it marks)',
    "fedspeed/table4_3": '"approximately 1.57x wall-clock time costs than FedAvg. But its convergence process is very fast. For the '
                         'final convergence speed, FedSpeed still has a considerable advantage over other algorithms." (§4, Table '
                         '4.3: total seconds to 85%, FedSpeed 4614, only FedSpeed-Ing lower)',
    "fedspeed/table4_5": '"FedSpeed can outperform the others on the Dir-0.3 setups whose heterogeneity is much stronger than Dir-0.6 '
                         'setups. [...] FedSpeed can still maintain a stable generalization performance." (§4, Table 4.5: drop '
                         'Dir-0.6 -> Dir-0.3 2.11, the smallest)',
    "fedspeed/table4_6": 'Table 4.6: prox alone 82.24, + correction 83.94, + perturbation 83.88, all three 85.70 (§4, "Improvements '
                         'of Different Modules")',
    "fedspeed/table4_7": 'Table 4.7: rho_0 = 0 / 0.01 / 0.05 / 0.1 / 0.2 give 83.97 / 84.6 / 85.38 / 85.72 / 84.35 ("rho_0 is a '
                         'constant value selected from the Table 4.7", §4)',
    "fedspeed/table4_8": '"FedSpeed can converge with any alpha in [0,1] [...] the experimental results shown in Table 4.8, indicate '
                         'that the generalization performance improves by increasing alpha." (§4, Table 4.8)',
    "fedspeed/fig4_2a": '"For the IID splits, FedSpeed achieves 6.1% ahead of FedAvg as 88.5%. [...] FedAdam suffers from the '
                        'increasing variance obviously with the accuracy dropping from 85.7% to 83.2%." (§4, Fig. 4.2 (a))',
    "fedspeed/fig4_3": '"in the FedAdam and FedCM, when K increases from 1 to 20, the accuracy drops about 13.7% and 10.6% '
                       'respectively. SCAFFOLD is affected lightly while its performance is much lower. [...] FedSpeed [...] '
                       'stabilizes to swing within 3.8% lightly." (§4, Fig. 4.3)',
    # ------------------------------------------------------------------ FedSSO (Ma et al., arXiv:2206.09576)
    "fedsso/table1": '"It can be seen that our method can achieve the corresponding accuracy with the least iteration rounds." '
                     '(§5, Table 1)',
    "fedsso/table2": '"FedSSO only communicates the same level of bits as FedAvg. [...] the total bits are doubled in FedDANE and '
                     'Scaffold. In FedNL, the compressed updates of Hessian matrices need to be uploaded" (§5, Table 2: FedNL n_c^2, '
                     'i.e. d x FedAvg\'s n_c)',
    "fedsso/table3": 'Table 3: the label sizes of the 3 clients',
    "fedsso/fig4": '"FedSSO is able to converge to a stationary point faster than other algorithms. It is also clear that FedSSO '
                   'achieves the highest accuracy on both datasets among all algorithms with optimal hyper-parameters." (§5, Fig. 4)',
    "fedsso/fig5": 'the spec\'s reading of Fig. 5 (fedsso.md §5): with shared hyper-parameters FedSSO "reaches lower training loss '
                   'and higher accuracy eventually"',
    "fedsso/fig6": '"our method can still achieve faster convergence than FedOpt, whether on Cifar10 or using LeNET model" (§5, Fig. 6)',
    "fedsso/fig7": '"FedAC can also achieve good convergence, and FedSSO still achieves faster convergence than other methods." '
                   '(§5, Fig. 7)',
    "fedsso/fig8": '"Fig 8 also shows faster convergence for our FedSSO." (§5, Fig. 8)',
    "fedsso/fig9": 'the spec\'s reading of Fig. 9 (fedsso.md §5): convergence first speeds up as tau grows, then slows when tau is '
                   'too large',
}
